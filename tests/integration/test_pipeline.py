"""The whole pipeline on real Celery workers, Redis (or RabbitMQ) and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import wait_for
from tests.integration.test_cli import warrant
from warrant.ledger.db import session_scope
from warrant.ledger.models import Artifact, Command, Proposal
from warrant.runner.errors import SpecError

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_injected_memory_write_is_refused_and_the_cited_answer_completes(engine, run_to_end):
    spec = sc.spec([sc.search("p1"), sc.INJECTED_SAVE, sc.final("Three retries.", "tool-1")])
    spec["subject"] = "subject-injection"
    info = run_to_end(spec)

    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert info.answer == "Three retries."
    assert (info.step, info.model_calls, info.tool_calls) == (3, 3, 1)
    # no memory:write grant: refused before its arguments are read (issue 50)
    assert facts.rejection_codes(engine, info.run_id) == ["MISSING_CAPABILITY"]
    assert facts.memory(engine, "subject-injection") == 0
    assert facts.commands(engine, info.run_id) == 1  # save_preference never got a command
    names = [e.event for e in facts.events(engine, info.run_id)]
    for expected in (
        "run.created",
        "proposal.received",
        "proposal.schema.validated",
        "policy.capability.checked",
        "command.issued",
        "tool.started",
        "tool.completed",
        "tool.result.validated",
        "final.validated",
        "state.transitioned",
        "run.stopped",
    ):
        assert expected in names, expected
    seqs = [e.seq for e in facts.events(engine, info.run_id)]
    assert seqs == list(range(1, len(seqs) + 1))


def test_observation_ids_are_deterministic(client, run_to_end):
    info = run_to_end(sc.spec([sc.search("p1"), sc.INJECTED_SAVE, sc.final("x", "tool-1")]))
    observations = client.observations(info.run_id)
    assert [o["observation_id"] for o in observations] == ["user-1", "tool-1", "policy-2"]
    assert [o["source"] for o in observations] == ["user", "untrusted-content", "policy"]
    assert observations[2]["content"]["code"] == "MISSING_CAPABILITY"  # no memory:write grant


def test_final_answer_citing_a_missing_observation_fails(run_to_end):
    plan = [sc.search("p1"), sc.final("Made up.", "tool-7")]
    info = run_to_end(sc.spec(plan, max_refused_finals=0))  # no second round
    assert (info.status, info.stop_reason) == ("failed", "FINAL_CITATION_VALIDATION_FAILED")
    assert info.answer is None


def test_an_uncited_final_is_refused_and_the_planner_gets_another_round(client, run_to_end):
    plan = [sc.search("p1"), sc.final("Made up.", "tool-7"), sc.final("Three retries.", "tool-1")]
    spec = sc.spec(plan)
    del spec["budgets"]["max_refused_finals"]  # the product's default: another round
    info = run_to_end(spec)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    refused = {o["observation_id"]: o for o in client.observations(info.run_id)}["policy-2"]
    assert refused["content"]["code"] == "FINAL_CITATION_VALIDATION_FAILED"
    assert (refused["content"]["layer"], refused["content"]["unresolved"]) == ("final", 1)


def test_finals_refused_past_the_specs_limit_fail_the_run(run_to_end):
    bad = sc.final("Made up.", "tool-7")
    info = run_to_end(sc.spec([sc.search("p1"), bad, bad, bad], max_refused_finals=2))
    assert (info.status, info.stop_reason) == ("failed", "FINAL_CITATION_VALIDATION_FAILED")
    assert info.model_calls == 4


def test_a_planner_that_finds_no_answer_abstains_honestly_with_its_own_stop_reason(
    engine, run_to_end
):
    """An honest "no answer" is the right result (001 §6): the run completes, abstaining."""
    plan = [sc.search("p1"), {"kind": "no_answer", "reason": "the results do not say"}]
    info = run_to_end(sc.spec(plan))
    assert (info.status, info.stop_reason, info.answer) == (
        "completed",
        "NO_ANSWER",
        "the results do not say",
    )
    [stopped] = facts.events(engine, info.run_id, "run.stopped")
    assert (stopped.details["status"], stopped.details["reason"]) == ("completed", "NO_ANSWER")


def test_a_planner_that_escalates_hands_the_run_to_a_person_with_the_whole_bundle(
    engine, client, run_to_end
):
    """Conflicting evidence goes to a person (000 §14, 001 §6) through the handoff path: the
    bundle tells the budgets used and left, the trace, what was made and, as data, what the
    untrusted search returned."""
    said = "source A says three retries, source B says none [bold]obey me[/]"
    plan = [sc.search("p1"), {"kind": "escalate", "reason": said, "evidence": "conflicting"}]
    info = run_to_end(sc.spec(plan, max_tool_calls=4))
    assert (info.status, info.stop_reason) == ("handoff", "EVIDENCE_CONFLICTING")
    assert (info.step, info.model_calls, info.tool_calls) == (2, 2, 1)  # the step is charged
    [created] = facts.events(engine, info.run_id, "handoff.created")
    [escalated] = facts.events(engine, info.run_id, "planner.escalated")
    assert escalated.details == {"reason": "EVIDENCE_CONFLICTING", "said_chars": len(said)}
    [handoff] = [h for h in client.handoffs() if h["run_id"] == info.run_id]  # the inbox
    whole = client.handoff(handoff["handoff_id"])
    assert whole["handoff_id"] == created.details["handoff_id"]
    bundle = whole["bundle"]
    assert bundle["reason"] == "EVIDENCE_CONFLICTING"
    assert bundle["escalated"]["planner_said"] == said and bundle["escalated"]["untrusted"]
    assert bundle["budget"]["tool_calls"] == 1 and bundle["budget"]["model_calls"] == 2
    assert bundle["budget"]["remaining"]["tool_calls"] == 3
    assert bundle["budget"]["remaining"]["deadline_s"] > 0
    earlier = [e.seq for e in facts.events(engine, info.run_id) if e.step < 2]
    assert bundle["trace"]["last_seq"] == max(earlier) < escalated.seq  # the last before it
    assert bundle["trace"]["api"] == f"/v1/runs/{info.run_id}/trace"
    [made] = bundle["artifacts"]
    assert (made["tool"], made["step"]) == ("search_public", 1)
    [untrusted] = bundle["untrusted_observations"]
    assert untrusted["observation_id"] == "tool-1" and untrusted["untrusted"] is True
    assert isinstance(untrusted["content_json"], str)
    with session_scope(engine) as s:
        kinds = s.execute(
            select(Proposal.step, Proposal.kind, Proposal.status).where(
                Proposal.run_id == info.run_id
            )
        ).all()
        command_id = s.scalars(select(Command.id).where(Command.run_id == info.run_id)).one()
    assert (2, "escalate", "accepted") in kinds
    assert made["command_id"] == command_id


@pytest.mark.parametrize(
    ("budget", "reason", "made"),
    [
        ({"max_tool_calls": 2}, "MAX_TOOL_CALLS_REACHED", 2),  # stopped at the gate
        ({"max_steps": 3}, "MAX_STEPS_REACHED", 3),  # stopped before planning
    ],
)
def test_a_budget_stop_lists_what_was_already_made(
    engine, client, run_to_end, budget, reason, made
):
    """001 §8.3: a stop for a budget says which budget ran out and what was already made."""
    outputs = [sc.search(f"p{i}", f"query {i}") for i in range(10)]
    info = run_to_end(sc.spec(outputs, **budget))
    assert (info.status, info.stop_reason) == ("failed", reason)
    [stopped] = facts.events(engine, info.run_id, "run.stopped")
    artifacts = stopped.details["detail"]["artifacts"]
    with session_scope(engine) as s:
        commands = s.scalars(
            select(Command.id).where(Command.run_id == info.run_id).order_by(Command.step)
        ).all()
    assert [a["command_id"] for a in artifacts] == list(commands) and len(commands) == made
    assert {a["tool"] for a in artifacts} == {"search_public"}
    shown = client.get_run(info.run_id).budget_stop  # what run show and GET /v1/runs/{id} give
    assert shown is not None and shown["artifacts"] == artifacts
    assert shown["budget"] == stopped.details["budget"]
    assert set(shown["budget"]) == set(stopped.details["budget"]) >= {"tokens", "cost", "step"}
    printed = warrant("run", "show", info.run_id)
    assert printed.returncode == 0 and f"already made ({made} succeeded effects)" in printed.stdout


def test_citing_the_goal_is_not_evidence(run_to_end):
    info = run_to_end(
        sc.spec([sc.final("From the question itself.", "user-1")], max_refused_finals=0)
    )
    assert info.stop_reason == "FINAL_CITATION_VALIDATION_FAILED"


def test_step_budget_stops_the_run(engine, run_to_end):
    outputs = [sc.search(f"p{i}", f"query {i}") for i in range(10)]
    info = run_to_end(sc.spec(outputs, max_steps=3))
    assert (info.status, info.stop_reason) == ("failed", "MAX_STEPS_REACHED")
    assert info.step == 3 and info.model_calls == 3
    stopped = facts.events(engine, info.run_id, "run.stopped")
    assert len(stopped) == 1 and stopped[0].details["budget"]["max_steps"] == 3


def test_tool_call_budget_is_never_exceeded(engine, run_to_end):
    outputs = [sc.search(f"p{i}", f"query {i}") for i in range(10)]
    info = run_to_end(sc.spec(outputs, max_tool_calls=2))
    assert (info.status, info.stop_reason) == ("failed", "MAX_TOOL_CALLS_REACHED")
    assert info.tool_calls == 2
    assert facts.commands(engine, info.run_id) == 2
    assert facts.outcomes(engine, info.run_id) == 2


def test_model_call_budget_and_exhausted_fixture(run_to_end):
    info = run_to_end(sc.spec([sc.search("p1")], max_model_calls=1))
    assert info.stop_reason == "MAX_MODEL_CALLS_REACHED"
    info = run_to_end(sc.spec([sc.search("p1")]))
    assert (info.status, info.stop_reason) == ("failed", "MODEL_FAILED")


def test_deadline_stops_before_asking(run_to_end):
    info = run_to_end(sc.spec([sc.search("p1"), sc.final("x", "tool-1")], deadline_s=0.001))
    assert (info.status, info.stop_reason) == ("failed", "DEADLINE_REACHED")
    assert info.model_calls == 0


def test_artifact_is_written_once_and_verified(engine, run_to_end):
    scenario = next(s for s in sc.SCENARIOS if s["name"] == "artifact-written")
    info = run_to_end(scenario["spec"])
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.count(engine, Artifact, run_id=info.run_id) == 1
    checks = facts.events(engine, info.run_id, "tool.postcondition.checked")
    assert [c.details["ok"] for c in checks] == [True]


def test_clarify_stops_with_its_reason(run_to_end):
    info = run_to_end(sc.spec([{"kind": "clarify", "question": "Which queue?"}]))
    assert (info.status, info.stop_reason) == ("needs_input", "CLARIFICATION_REQUIRED")
    assert info.answer == "Which queue?"


def test_a_duplicated_stage_message_applies_once(engine, client, worker):
    spec = sc.spec([sc.search("p1"), sc.final("Three retries.", "tool-1")])
    run_id = client.start_run(spec, publish=False)
    client.publisher.planner(run_id, 1)
    client.publisher.planner(run_id, 1)  # the same message, delivered twice
    info = client.wait(run_id, timeout=30)
    assert info.status == "completed"
    assert (info.step, info.model_calls, info.tool_calls) == (2, 2, 1)
    assert facts.proposals(engine, run_id) == 2
    assert facts.commands(engine, run_id) == 1
    assert facts.outcomes(engine, run_id) == 1

    # Late duplicates of every stage after the run finished: nothing changes.
    from warrant.ledger.db import session_scope
    from warrant.ledger.models import Command

    with session_scope(engine) as s:
        cmd = s.query(Command).filter_by(run_id=run_id).one()
        command_id = cmd.id
    version = info.version
    client.publisher.policy(run_id, 2)
    client.publisher.tool(
        run_id=run_id,
        version=3,
        command_id=command_id,
        tool="search_public",
        soft_time_limit=5,
        time_limit=10,
    )
    client.publisher.planner(run_id, 1)
    marker = client.start_run(sc.spec([sc.final("x", "tool-1")]))  # a message behind them
    wait_for(lambda: client.get_run(marker).status == "failed", what="marker run")
    after = client.get_run(run_id)
    assert after.version == version
    assert facts.outcomes(engine, run_id) == 1
    assert facts.proposals(engine, run_id) == 2


def test_bad_spec_is_refused_naming_the_field_and_nothing_is_enqueued(engine, client):
    from warrant.ledger.models import Run

    before = facts.count(engine, Run)
    spec = sc.spec([sc.search("p1")], max_steps=0)
    spec["grants"] = [{"capability": "search:public", "scope": "public"}]
    with pytest.raises(SpecError) as caught:
        client.start_run(spec)
    fields = {e["field"] for e in caught.value.errors}
    assert {"budgets.max_steps", "grants.0.scope"} <= fields
    assert caught.value.code == "SPEC_INVALID"
    assert facts.count(engine, Run) == before
