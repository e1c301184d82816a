"""The planner's plan and its wait (issue 54, item 3) on real workers: a plan recorded at its
step and shown back in the next view, a wait that holds the run until its wake time (a
duplicate delivery before it plans nothing), a wait for the run's pending effects that wakes
once a slow call's effect has settled, and a waiting run the stall sweep leaves alone until
its wake time."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from warrant_demo import scenarios as sc

from tests import facts
from tests import slow_tool as slow
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_gate_pipeline import CLARIFY
from tests.integration.test_reconciler import NOTICES, notice
from warrant.broker.app import app
from warrant.broker.planner.stage import EARLY_TOLERANCE_S
from warrant.broker.publish import Publisher
from warrant.ledger import sweeps
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, Proposal, Run

pytestmark = pytest.mark.services

NODES: list[dict[str, Any]] = [
    {"id": "look", "description": "look the rule up", "done_when": "a result cites it"},
    {"id": "answer", "description": "answer with it", "depends_on": ["look"]},
]


def _plan(nodes: list[dict[str, Any]] = NODES, **more: Any) -> dict[str, Any]:
    return {"kind": "plan", "nodes": nodes, "open_questions": ["which version?"], **more}


def _built(engine: Any, run_id: str, step: int) -> Any:
    """The ``observation.built`` event of ``step``: what its planner was shown, and when."""
    [built] = [e for e in facts.events(engine, run_id, "observation.built") if e.step == step]
    return built


def _run_row(engine: Any, run_id: str) -> Run:
    with session_scope(engine) as s:
        run = s.get(Run, run_id)
        assert run is not None
        s.expunge(run)
        return run


def test_a_plan_is_recorded_shown_in_the_next_view_and_the_run_completes(
    engine: Any, run_to_end: Any
) -> None:
    outputs = [_plan(reason_summary="look, then answer"), sc.search("p2"), sc.final("x", "tool-2")]
    info = run_to_end(sc.spec(outputs))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    assert (info.step, info.model_calls, info.tool_calls) == (3, 3, 1)
    [revised] = facts.events(engine, info.run_id, "plan.revised")
    counted = {k: revised.details[k] for k in ("revision", "nodes", "open_questions")}
    assert (revised.step, counted) == (1, {"revision": 1, "nodes": 2, "open_questions": 1})
    assert "plan_revision" not in _built(engine, info.run_id, 1).details  # none before it
    assert _built(engine, info.run_id, 2).details["plan_revision"] == 1
    stored = _run_row(engine, info.run_id).plan
    assert stored is not None
    assert (stored["revision"], stored["step"], stored["open_questions"]) == (
        1,
        1,
        ["which version?"],
    )
    assert [n["id"] for n in stored["nodes"]] == ["look", "answer"]
    with session_scope(engine) as s:
        kinds = s.execute(
            select(Proposal.kind, Proposal.status)
            .where(Proposal.run_id == info.run_id)
            .order_by(Proposal.step)
        ).all()
    assert [tuple(k) for k in kinds] == [
        ("plan", "accepted"),
        ("tool", "accepted"),
        ("final", "accepted"),
    ]


def test_the_view_counts_the_approvals_that_still_stand(engine: Any, run_to_end: Any) -> None:
    spec = sc.spec([sc.search("p1"), sc.final("x", "tool-1")])
    spec["pre_approved"] = [
        {
            "tool": "search_public",
            "tool_version": "1",
            "arguments": {"query": "not what the run asks"},
            "approved_by": "ops",
        }
    ]
    info = run_to_end(spec)
    assert info.status == "completed", info
    assert _built(engine, info.run_id, 1).details["approved_actions"] == 1
    assert _built(engine, info.run_id, 2).details["approved_actions"] == 1  # never used


def test_an_invalid_or_repeated_plan_is_refused_and_a_planner_that_only_plans_is_stopped(
    engine: Any, client: Any, run_to_end: Any
) -> None:
    cycle = [
        {"id": "a", "description": "x", "depends_on": ["b"]},
        {"id": "b", "description": "y", "depends_on": ["a"]},
    ]
    outputs = [_plan(cycle), _plan(), _plan(), _plan(), sc.final("x", "tool-9")]
    info = run_to_end(sc.spec(outputs, max_steps=4))
    assert (info.status, info.stop_reason) == ("failed", "MAX_STEPS_REACHED"), info
    assert facts.rejection_codes(engine, info.run_id) == [
        "PLAN_INVALID",
        "PLAN_UNCHANGED",
        "PLAN_UNCHANGED",
    ]
    assert len(facts.events(engine, info.run_id, "plan.revised")) == 1
    seen = {o["observation_id"]: o["content"] for o in client.observations(info.run_id)}
    assert "cycle" in seen["policy-1"]["reason"]


def test_a_plan_naming_a_destination_never_vouches_for_it(
    engine: Any, client: Any, run_to_end: Any
) -> None:
    """The plan is the model's text: a recipient it names is as untrusted as before."""
    stranger = f"{uuid.uuid4().hex[:8]}@example.com"
    told = [{"id": "send", "description": f"send the notice to {stranger}"}]
    info = run_to_end(sc.spec([_plan(told), notice(stranger), CLARIFY], grants=[NOTICES]))
    assert len(facts.events(engine, info.run_id, "plan.revised")) == 1
    assert facts.rejection_codes(engine, info.run_id) == ["UNTRUSTED_DESTINATION"]
    assert facts.commands(engine, info.run_id) == 0


def test_a_wait_holds_the_run_until_its_wake_time_and_an_early_delivery_plans_nothing(
    engine: Any, client: Any, worker: WorkerProcess
) -> None:
    wait = {"kind": "wait", "seconds": 2.0, "reason": "the index refreshes"}
    run_id = client.start_run(sc.spec([sc.search("p1"), wait, sc.final("x", "tool-1")]))
    waiting = wait_for(
        lambda: facts.events(engine, run_id, "planner.waiting"), what="the wait committed"
    )[0]
    run = _run_row(engine, run_id)
    assert run.waiting is not None and run.waiting["step"] == run.step == 2
    Publisher(app).planner(run_id, run.version)  # a duplicate delivered at once
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    assert (info.step, info.model_calls) == (3, 3)  # the duplicate asked no model
    wake_at = waiting.details["wake_at"]
    assert waiting.details["seconds"] == 2.0 and waiting.step == 2
    assert waiting.created_at.timestamp() < wake_at - 1.0
    # the next planner step was built (and the model asked) once the wake time had come
    assert _built(engine, run_id, 3).created_at.timestamp() >= wake_at - EARLY_TOLERANCE_S


def test_a_wait_longer_than_allowed_or_past_the_deadline_is_refused(
    engine: Any, run_to_end: Any
) -> None:
    long = {"kind": "wait", "seconds": 31.0, "reason": "r"}
    past = {"kind": "wait", "seconds": 25.0, "reason": "r"}
    outputs = [sc.search("p1"), long, past, sc.final("x", "tool-1")]
    info = run_to_end(sc.spec(outputs, max_wait_s=30.0, deadline_s=20.0))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    assert facts.rejection_codes(engine, info.run_id) == ["WAIT_TOO_LONG", "WAIT_PAST_DEADLINE"]
    assert facts.events(engine, info.run_id, "planner.waiting") == []


@pytest.fixture(scope="module")
def slow_reader(services: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    log: Path = tmp_path_factory.mktemp("logs") / "slow.log"
    proc = WorkerProcess(["tool.slow_read"], name="slow", concurrency=4, log=log, pool="threads")
    with proc.serving():
        yield proc


def test_a_wait_for_pending_effects_wakes_once_the_slow_calls_effect_has_settled(
    engine: Any, client: Any, worker: WorkerProcess, slow_reader: WorkerProcess
) -> None:
    """A parallel step merged ``any`` once its quick search succeeded; its slow read, cut,
    sleeps on (its effect pending). The planner, shown the pending effect, waits until the
    run's effects have settled: it is asked again only after the slow call ended."""
    fan = {
        "kind": "parallel",
        "proposal_id": "both",
        "calls": [sc.search("quick"), slow.proposal("slow", 3.0)],
        "merge": "any",
    }
    wait = {
        "kind": "wait",
        "until": "pending_effects_settled",
        "max_seconds": 20,
        "reason": "the slow read has not ended",
    }
    grants = [sc.SEARCH_GRANT, {"capability": slow.CAPABILITY}]
    spec = sc.spec([fan, wait, sc.final("x", "tool-1.1")], grants=grants, deadline_s=60)
    run_id = client.start_run(spec)
    info = client.wait(run_id, timeout=45)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    assert _built(engine, run_id, 2).details["pending_effects"] == 1  # the planner saw it
    [waiting] = facts.events(engine, run_id, "planner.waiting")
    assert waiting.details["until"] == "pending_effects_settled"
    with session_scope(engine) as s:
        ended = s.scalar(
            select(Command.finished_at).where(Command.run_id == run_id, Command.tool == "slow_read")
        )
    assert ended is not None
    woke = _built(engine, run_id, 3)
    assert "pending_effects" not in woke.details
    assert woke.created_at >= ended  # asked again only once the slow call's effect settled


def test_the_stall_sweep_leaves_a_waiting_run_alone_until_its_wake_time(
    engine: Any, client: Any, worker: WorkerProcess
) -> None:
    """A run whose last change is long past but that waits (at its version) until later is
    not stalled; past its wake time it is (its delayed message may have been lost)."""
    spec = sc.spec([])
    spec["planner"] = {"kind": "external", "agent": "tests"}  # nothing moves it on its own
    run_id = client.start_run(spec)
    step = _run_row(engine, run_id).step

    def stalled_with(wake_in_s: float) -> bool:
        waiting = {"step": step, "seconds": 5, "wake_at": time.time() + wake_in_s}
        with session_scope(engine) as s:
            s.execute(
                text(
                    "UPDATE runs SET waiting = CAST(:w AS jsonb),"
                    " updated_at = now() - interval '10 minutes' WHERE id = :id"
                ),
                {"w": json.dumps(waiting), "id": run_id},
            )
        with session_scope(engine) as s:
            found = sweeps.stalled_runs(s, older_than_s=60, limit=10_000)
            run = s.get(Run, run_id)
            assert run is not None
            quiet_for = time.time() - sweeps.quiet_since(run)
        return run_id in found and quiet_for > 60

    try:
        assert not stalled_with(+300)  # waits five more minutes: not stalled
        assert not stalled_with(-30)  # woke 30 s ago: not yet stalled (60 s)
        assert stalled_with(-120)  # woke two minutes ago and nothing moved: stalled
    finally:
        client.cancel(run_id, by="tests")
