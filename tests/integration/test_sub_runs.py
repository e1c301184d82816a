"""Sub-runs with delegated authority (issue 53): a coordinator's ``delegate`` call starts a child
run whose grants and budgets can only narrow its own, on real workers, a real reconciler, Redis
and PostgreSQL. Each test asserts on the ledger: the child's row and trace, the parent's
counters, refusals with their codes, and what the demo service did."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import wait_for
from tests.integration.test_reconciler import settle, sweep_now
from tests.integration.test_tool_execution import lookup, refund, uid
from warrant.ledger.db import session_scope
from warrant.ledger.models import GrantRow, Observation, Proposal, Run

pytestmark = [pytest.mark.services, pytest.mark.slow]

LOOKUP = {"capability": "lookup:read"}
DELEGATE = {"capability": "runs:delegate"}
BENCH = {"capability": "bench:read"}


def delegate(goal: str, outputs: list[Any], grants: list[dict[str, Any]], pid: str, **budgets):
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "delegate",
        "tool_version": "1",
        "arguments": {
            "goal": goal,
            "planner": {"kind": "fixture", "outputs": outputs},
            "grants": grants,
            "budgets": {"max_refused_finals": 0, **budgets},
        },
        "reason_summary": "",
        "source_observation_ids": [],
    }


def coordinator(outputs: list[Any], grants: list[dict[str, Any]], **budgets) -> dict[str, Any]:
    return {**sc.spec(outputs, grants=grants, **budgets), "goal": "Look after order A."}


def children(engine, run_id: str) -> list[Run]:
    with session_scope(engine) as s:
        rows = s.scalars(select(Run).where(Run.parent_run_id == run_id).order_by(Run.created_at))
        return list(rows)


def run_row(engine, run_id: str) -> Run:
    with session_scope(engine) as s:
        return s.get(Run, run_id)


def proposals(engine, run_id: str) -> list[Proposal]:
    with session_scope(engine) as s:
        q = select(Proposal).where(Proposal.run_id == run_id).order_by(Proposal.step)
        return list(s.scalars(q))


def test_a_coordinator_delegates_a_lookup_and_cannot_delegate_a_wider_refund(
    engine, client, worker, reconciler_worker, demo
):
    order_a, order_b = "ord_" + uid("a").replace("-", ""), "ord_" + uid("b").replace("-", "")
    child_outputs = [lookup("order 42"), sc.final("Order 42 is shipped.", "tool-1")]
    refund_b = [refund(order_b), sc.final("Refunded.", "tool-1")]
    grants = [
        {"capability": "payments:refund", "resource_scope": f"order:{order_a}"},
        LOOKUP,
        DELEGATE,
    ]
    run_id = client.start_run(
        coordinator(
            [
                delegate("Look up order 42.", child_outputs, [LOOKUP], "p1", max_tool_calls=2),
                delegate(
                    "Refund order B.",
                    refund_b,
                    [{"capability": "payments:refund", "resource_scope": f"order:{order_b}"}],
                    "p2",
                    max_tool_calls=1,
                ),
                sc.final("Order 42 is shipped.", "job-1"),
            ],
            grants,
            max_tool_calls=4,
        )
    )
    info = settle(client, run_id, timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")

    [child] = children(engine, run_id)  # the refund's child never existed
    assert (child.status, child.stop_reason, child.subject) == (
        "completed",
        "FINAL_ANSWER_VALIDATED",
        "demo-user",
    )
    assert child.tool_calls == 1 and child.tool_calls_by_tool == {"lookup": 1}
    assert [g["capability"] for g in child.spec["grants"]] == ["lookup:read"]
    assert child.spec["policy"]["max_delegation_depth"] == 0

    # the refund of order B was refused at the gate, with its code, before any child existed
    refused = [p for p in proposals(engine, run_id) if p.proposal_id == "p2"]
    assert [p.rejection_code for p in refused] == ["DELEGATION_WIDENS_GRANT"]
    assert demo.refund_count(order_id=order_b) == 0

    # the child's result is one observation of the parent, its source the child, untrusted
    with session_scope(engine) as s:
        job = s.scalars(
            select(Observation).where(
                Observation.run_id == run_id, Observation.observation_id == "job-1"
            )
        ).one()
    assert job.source == "untrusted-content"
    assert job.content["output"]["child_run_id"] == child.id
    assert job.content["output"]["answer"] == "Order 42 is shipped."
    assert job.content["output"]["citations"] == ["tool-1"]

    # each hop named on both ends
    [created] = facts.events(engine, child.id, "run.created")
    assert created.details["parent_run_id"] == run_id
    assert created.details["grants"] == [{"capability": "lookup:read", "resource_scope": "*"}]
    [delegated] = facts.events(engine, run_id, "run.delegated")
    assert delegated.details["child_run_id"] == child.id
    assert delegated.details["tool_calls"] == 2  # reserved at the spawn
    [ended] = facts.events(engine, run_id, "run.child_ended")
    assert ended.details["returned"]["tool_calls"] == 1  # the child used one of two

    # the parent's budget accounts for the child: its own call and the child's one lookup
    parent = run_row(engine, run_id)
    assert parent.tool_calls == 2
    assert parent.tool_calls_by_tool == {"delegate": 1, "lookup": 1}

    # replayed (issue 55): the delegation layer decides each call again as then
    replayed = client.replay_run(run_id)
    assert [
        (s["tool"], s["now"]["decision"], s["now"]["code"], s["change"]) for s in replayed["steps"]
    ] == [
        ("delegate", "accepted", None, None),
        ("delegate", "refused", "DELEGATION_WIDENS_GRANT", None),
    ]
    assert [s["change"] for s in client.replay_run(child.id)["steps"]] == [None]


def test_a_child_budget_beyond_the_parents_remainder_is_refused(engine, client, worker, demo):
    over = delegate("Look up order 42.", [lookup()], [LOOKUP], "p1", max_tool_calls=3)
    run_id = client.start_run(
        coordinator(
            [over, {"kind": "no_answer", "reason": "no"}], [LOOKUP, DELEGATE], max_tool_calls=3
        )
    )
    info = client.wait(run_id, timeout=30)
    assert info.status == "completed" and info.stop_reason == "NO_ANSWER"  # it abstained
    [p1] = [p for p in proposals(engine, run_id) if p.proposal_id == "p1"]
    assert p1.rejection_code == "DELEGATION_OVER_BUDGET"  # 3 asked, 2 left after the call itself
    assert children(engine, run_id) == []
    assert run_row(engine, run_id).tool_calls == 0


def test_a_child_that_abstains_is_no_answer_for_its_parent(
    engine, client, worker, reconciler_worker, demo
):
    """A child's honest abstention completes the child (``NO_ANSWER``), but its parent's
    ``delegate`` job still fails with that code: no answer, never a result to cite."""
    abstains = [{"kind": "no_answer", "reason": "order 42 is not in the records"}]
    run_id = client.start_run(
        coordinator(
            [
                delegate("Look up order 42.", abstains, [LOOKUP], "p1"),
                sc.final("Shipped.", "job-1"),  # refused: a failed job is no evidence
                {"kind": "no_answer", "reason": "the child found nothing"},
            ],
            [LOOKUP, DELEGATE],
            max_refused_finals=1,
        )
    )
    [child_id] = wait_for(lambda: [c.id for c in children(engine, run_id)], what="the child")
    info = settle(client, run_id, timeout=60)
    child = run_row(engine, child_id)
    assert (child.status, child.stop_reason) == ("completed", "NO_ANSWER")
    assert (info.status, info.stop_reason) == ("completed", "NO_ANSWER")
    settled = [e.details for e in facts.events(engine, run_id, "job.settled")]
    assert [(d.get("status"), d.get("code")) for d in settled] == [("failed", "NO_ANSWER")]
    assert "FINAL_CITATION_VALIDATION_FAILED" in facts.rejection_codes(engine, run_id)


def test_a_grant_with_uses_is_reserved_and_what_the_child_did_not_use_comes_back(
    engine, client, worker, reconciler_worker, demo
):
    limited = {"capability": "lookup:read", "max_uses": 3}
    child_outputs = [lookup("order 42"), sc.final("Shipped.", "tool-1")]
    run_id = client.start_run(
        coordinator(
            [
                delegate("Look up.", child_outputs, [{**LOOKUP, "max_uses": 2}], "p1"),
                sc.final("Shipped.", "job-1"),
            ],
            [limited, DELEGATE],
        )
    )
    [child_id] = wait_for(lambda: [c.id for c in children(engine, run_id)], what="the child")
    info = settle(client, run_id, timeout=60)
    assert info.status == "completed"
    with session_scope(engine) as s:
        uses = s.scalars(
            select(GrantRow.uses).where(
                GrantRow.run_id == run_id, GrantRow.capability == "lookup:read"
            )
        ).one()
    assert uses == 1  # two reserved at the spawn, the child used one, one came back
    assert run_row(engine, child_id).status == "completed"


def test_cancelling_the_parent_cancels_a_child_mid_tool(
    engine, client, worker, reconciler_worker, demo
):
    wait = {
        "kind": "tool",
        "proposal_id": "c1",
        "tool": "wait_read",
        "tool_version": "1",
        "arguments": {"n": 1, "ms": 60_000},
        "reason_summary": "",
        "source_observation_ids": [],
    }
    run_id = client.start_run(
        coordinator(
            [delegate("Wait.", [wait, sc.final("done", "tool-1")], [BENCH], "p1")],
            [BENCH, DELEGATE],
        )
    )
    [child_id] = wait_for(lambda: [c.id for c in children(engine, run_id)], what="the child")
    wait_for(lambda: facts.events(engine, child_id, "tool.started"), what="the child's tool")
    client.cancel(run_id, by="test")
    child = wait_for(
        lambda: (r := run_row(engine, child_id)).status == "cancelled" and r, what="child cancelled"
    )
    assert child.stop_reason == "CANCELLED"
    parent = settle(client, run_id, until=("cancelled", "handoff"), timeout=60)
    assert parent.status == "cancelled"
    # the child's wait was cut, not run to its end: no succeeded outcome
    assert not facts.events(engine, child_id, "tool.succeeded")


def test_a_child_whose_cost_cap_its_model_cannot_meet_is_refused_at_the_spawn(
    engine, client, worker, demo
):
    unpriced = {
        "kind": "openai",
        "model": "a-model-nobody-prices",
        "base_url": "http://127.0.0.1:9/v1",
    }
    call = delegate("Look up.", [], [LOOKUP], "p1")
    call["arguments"]["planner"] = unpriced
    spec = coordinator(
        [call, {"kind": "no_answer", "reason": "no"}],
        [LOOKUP, DELEGATE],
        max_cost=1.0,
        unpriced_calls_free=False,
    )
    # the child's endpoint is a destination: the user names it (else the provenance layer
    # refuses a base_url only the model wrote, UNTRUSTED_DESTINATION)
    run_id = client.start_run({**spec, "goal": f"{spec['goal']} Ask {unpriced['base_url']}."})
    info = client.wait(run_id, timeout=30)
    assert info.stop_reason == "NO_ANSWER"
    [outcome] = [e.details for e in facts.events(engine, run_id, "tool.completed")]
    assert (outcome["status"], outcome["code"]) == ("rejected", "SPEC_INVALID")
    assert children(engine, run_id) == []  # nothing recorded, nothing reserved
    parent = run_row(engine, run_id)
    assert (parent.tool_calls, parent.cost_used) == (1, 0.0)


def parallel(calls: list[dict[str, Any]], **extra) -> dict[str, Any]:
    return {"kind": "parallel", "proposal_id": "fan", "calls": calls, **extra}


def test_a_parallel_step_starts_children_together_and_merges_them_by_its_rule(
    engine, client, worker, reconciler_worker, demo
):
    """Orchestrator-workers: two children in one parallel step, merge ``all``; each child's
    budget is carved after the one before it, and both results come back as the step's."""
    first = delegate("Look up A.", [lookup("A"), sc.final("A found.", "tool-1")], [LOOKUP], "c1")
    second = delegate("Look up B.", [lookup("B"), sc.final("B found.", "tool-1")], [LOOKUP], "c2")
    for call in (first, second):  # carved in turn: each gets its own, not all that is left
        call["arguments"]["budgets"].update(max_tool_calls=2, max_model_calls=3)
    run_id = client.start_run(
        coordinator(
            [parallel([first, second]), sc.final("Both found.", "tool-1.1", "tool-1.2")],
            [LOOKUP, DELEGATE],
            max_tool_calls=8,
        )
    )
    info = settle(client, run_id, timeout=60)
    assert (info.status, info.answer) == ("completed", "Both found."), info
    kids = children(engine, run_id)
    assert sorted(c.answer for c in kids) == ["A found.", "B found."]
    assert all(c.status == "completed" for c in kids)
    [merged] = facts.events(engine, run_id, "step.merged")
    assert merged.details["verdict"] == "complete"
    # two calls, each reserving 2 and using 1: the parent holds 2 + 2 of the children's
    parent = run_row(engine, run_id)
    assert (parent.tool_calls, parent.tool_calls_by_tool) == (4, {"delegate": 2, "lookup": 2})


def test_a_rule_met_cuts_the_children_still_running(
    engine, client, worker, reconciler_worker, demo
):
    """Merge ``any``: the first child's answer meets the rule, the other child (waiting in
    one long wait) is cancelled through its job's cancel, not left to run."""
    wait = {
        "kind": "tool",
        "proposal_id": "w1",
        "tool": "wait_read",
        "tool_version": "1",
        "arguments": {"n": 7, "ms": 60_000},
        "reason_summary": "",
        "source_observation_ids": [],
    }
    quick = delegate(
        "Look up A.", [lookup("A"), sc.final("A found.", "tool-1")], [LOOKUP], "q",
        max_model_calls=3, max_tool_calls=2,
    )  # fmt: skip
    slow = delegate(
        "Wait.", [wait, sc.final("late", "tool-1")], [BENCH], "s",
        max_model_calls=3, max_tool_calls=2,
    )  # fmt: skip
    run_id = client.start_run(
        coordinator(
            [parallel([quick, slow], merge="any"), sc.final("A found.", "tool-1.1")],
            [LOOKUP, BENCH, DELEGATE],
            max_tool_calls=10,
        )
    )
    info = settle(client, run_id, timeout=60)
    assert info.status == "completed", info
    [merged] = facts.events(engine, run_id, "step.merged")
    assert merged.details["verdict"] == "partial"  # the rule holds, one call was cut
    cut = next(b for b in merged.details["branches"] if b["branch"] == 2)
    assert (cut["status"], cut["cancelled"]) == ("cancelled", "rule_met")
    slow_child = next(c for c in children(engine, run_id) if c.goal == "Wait.")

    def cancelled_now() -> Any:
        sweep_now(client)  # the job polls that see the step merged and cancel the child
        child = run_row(engine, slow_child.id)
        return child.status == "cancelled" and child

    cancelled = wait_for(cancelled_now, timeout=30, what="the cut child cancelled")
    assert cancelled.stop_reason == "CANCELLED"
    [asked] = facts.events(engine, slow_child.id, "cancel.requested")
    assert asked.details["by"] == "parent"  # its job's cancel, not its own deadline
    assert not facts.events(engine, slow_child.id, "tool.succeeded")


def test_a_parent_goes_on_soon_after_its_children_end_not_at_the_next_sweep(
    engine, client, worker, reconciler_worker, demo, tmp_path
):
    """The reconciler's sweep runs every 120 s here and no test triggers one: the parent
    learns that each child ended from its job's own polls (sent one ``JobHooks.interval_s``,
    1 s for a sub-run, after the job was accepted and after each poll that found it running),
    so it goes on within seconds of each child's end (it waited for the next sweep:
    ``WARRANT_RECONCILE_INTERVAL_S``, 10 s by default)."""
    env = {**reconciler_worker.env, "WARRANT_RECONCILE_INTERVAL_S": "120"}
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "warrant.broker.app", "beat", "-l", "warning",
         "--schedule", str(tmp_path / "beat")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    child = [lookup("order 42"), sc.final("Order 42 is shipped.", "tool-1")]
    # cites its second call: the first child's output (job-1) says "tool-1", and a delegation's
    # arguments copied from untrusted content are refused
    other = [lookup("order 43"), lookup("order 44"), sc.final("Both are on their way.", "tool-2")]
    try:
        run_id = client.start_run(
            coordinator(
                [
                    delegate("Look up order 42.", child, [LOOKUP], "p1", max_tool_calls=2),
                    delegate("Look up orders 43, 44.", other, [LOOKUP], "p2", max_tool_calls=3),
                    sc.final("Order 42 is shipped.", "job-1"),
                ],
                [LOOKUP, DELEGATE],
                max_tool_calls=8,
            )
        )
        info = client.wait(run_id, timeout=60)  # no sweep_now: only beat schedules anything
    finally:
        beat.terminate()
        beat.wait(10)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    ended = facts.events(engine, run_id, "run.child_ended")
    kids = {c.id: c for c in children(engine, run_id)}
    assert len(ended) == 2 and set(kids) == {e.details["child_run_id"] for e in ended}
    noticed = [
        (e.created_at - kids[e.details["child_run_id"]].finished_at).total_seconds() for e in ended
    ]
    print(f"a child's end to its parent's notice: {[round(s, 2) for s in noticed]} s")
