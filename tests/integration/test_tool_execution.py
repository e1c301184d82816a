"""Tool workers: typed outcomes, deadlines, retries, idempotency, cancellation.

Adapted from the 14 acceptance probes and six exercises of 001 (sections 12, 16) and
experiments 3-4 of 000 (section 16), over real workers, Redis and PostgreSQL, against the
demo service (a full fake with fault injection).
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import psutil
import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests import stopping_tool as stopping
from tests.conftest import wait_for
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, Handoff, OutcomeRow

pytestmark = [pytest.mark.services, pytest.mark.slow]

LOOKUP = {"capability": "lookup:read"}
DRAFTS = {"capability": "drafts:write"}
REFUND = {"capability": "payments:refund"}


def lookup(query: str = "order 42", pid: str = "p1"):
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "lookup",
        "tool_version": "1",
        "arguments": {"query": query},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def draft(draft_id: str, content: str = "hello", pid: str = "p1"):
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "save_draft",
        "tool_version": "1",
        "arguments": {"draft_id": draft_id, "content": content},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def refund(order_id: str, amount: int = 1500, pid: str = "p1"):
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "issue_refund",
        "tool_version": "1",
        "arguments": {"order_id": order_id, "amount_cents": amount, "currency": "EUR"},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def spec(outputs, grants=(LOOKUP, DRAFTS, REFUND), **budgets):
    return sc.spec(list(outputs), grants=list(grants), **budgets)


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def command_of(engine, run_id: str) -> Command:
    with session_scope(engine) as s:
        return s.query(Command).filter_by(run_id=run_id).order_by(Command.step.desc()).first()


def started(engine, run_id: str, n: int = 1):
    return wait_for(
        lambda: len(facts.events(engine, run_id, "tool.started")) >= n, what=f"tool.started x{n}"
    )


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


# --- the 14 acceptance probes --------------------------------------------------------------


def test_probe_01_canonical_arguments():
    from warrant.runner.canonical import canonical_json

    assert canonical_json({"z": {"b": 2, "a": 1}, "a": [{"d": 4, "c": 3}]}) == canonical_json(
        {"a": [{"c": 3, "d": 4}], "z": {"a": 1, "b": 2}}
    )


def test_probe_02_a_repeat_after_a_state_change_is_legal(run_to_end):
    info = run_to_end(
        spec(
            [lookup(pid="p1"), lookup(pid="p2"), sc.final("ok", "tool-2")], max_repeated_proposal=1
        )
    )
    assert (info.status, info.tool_calls) == ("completed", 2)


def test_probe_03_no_progress_loop_stops(engine, run_to_end):
    info = run_to_end(spec([lookup(pid=f"p{i}") for i in range(5)], max_repeated_proposal=1))
    assert info.stop_reason == "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    assert info.tool_calls == 2


def test_probe_04_model_failure_is_classified(engine, run_to_end):
    info = run_to_end(spec([]))
    assert info.stop_reason == "MODEL_FAILED"
    names = [e.event for e in facts.events(engine, info.run_id)]
    assert names.index("model.failed") < names.index("run.stopped") == len(names) - 1


def test_probe_05_unverified_completion_is_refused(run_to_end):
    info = run_to_end(spec([sc.final("done, trust me")], max_refused_finals=0))
    assert (info.status, info.stop_reason) == ("failed", "FINAL_CITATION_VALIDATION_FAILED")


def test_probe_06_model_call_budget_zero(run_to_end):
    info = run_to_end(spec([lookup()], max_model_calls=0))
    assert (info.stop_reason, info.model_calls) == ("MAX_MODEL_CALLS_REACHED", 0)


def test_probe_07_an_uncertain_read_invents_no_side_effect(engine, demo, run_to_end):
    demo.set_fault("lookup", "timeout_after_commit")
    info = run_to_end(spec([lookup(), sc.final("x", "tool-1")]))
    assert (info.status, info.stop_reason) == ("failed", "TOOL_FAILED")
    assert not facts.events(engine, info.run_id, "effect.reconciliation_required")


def test_probe_08_planner_output_cannot_inject_state(client, run_to_end):
    forged = {**lookup(), "observations": [{"observation_id": "tool-9"}]}
    info = run_to_end(spec([forged, sc.final("x", "tool-9")], max_refused_finals=0))
    assert info.stop_reason == "FINAL_CITATION_VALIDATION_FAILED"
    assert [o["observation_id"] for o in client.observations(info.run_id)] == ["user-1", "policy-1"]


def test_probe_09_the_run_deadline_bounds_a_read(engine, demo, run_to_end):
    demo.set_fault("lookup", "slow", delay_s=20)
    t0 = time.monotonic()
    info = run_to_end(spec([lookup(), sc.final("x", "tool-1")], deadline_s=1.5))
    assert (info.status, info.stop_reason) == ("failed", "DEADLINE_REACHED")
    assert time.monotonic() - t0 < 10
    cmd = command_of(engine, info.run_id)
    assert cmd.timeout_s < 1.6  # min(tool timeout 3s, deadline remaining)


def test_a_deadline_a_tool_call_reaches_lists_what_was_already_made(
    engine, client, demo, run_to_end, draft_worker
):
    """001 §8.3 on the tool stage's path: the deadline ends the run as a read runs into it,
    and the stop still lists the effects already made (it used to carry the budget only)."""
    demo.set_fault("lookup", "slow", delay_s=20)
    outputs = [draft(uid("d")), lookup(pid="p2"), sc.final("x", "tool-1")]
    info = run_to_end(spec(outputs, deadline_s=3.0))  # under the read's own 3 s
    assert (info.status, info.stop_reason) == ("failed", "DEADLINE_REACHED")
    [stopped] = facts.events(engine, info.run_id, "run.stopped")
    with session_scope(engine) as s:
        drafted = s.scalars(
            select(Command.id).where(Command.run_id == info.run_id, Command.step == 1)
        ).all()
    made = stopped.details["detail"]["artifacts"]
    assert [(a["command_id"], a["tool"]) for a in made] == [(drafted[0], "save_draft")]
    assert client.get_run(info.run_id).budget_stop["artifacts"] == made


def test_probe_10_adapter_reported_unknown_write(engine, client, demo, draft_worker):
    did = uid("d")
    demo.set_fault("save_draft", "timeout_after_commit")
    run_id = client.start_run(spec([draft(did), sc.final("x", "tool-1")]))
    info = client.wait(run_id, timeout=30, until={"reconciling", "failed", "completed"})
    assert (info.status, info.stop_reason) == ("reconciling", "UNKNOWN_EFFECT")
    ev = facts.events(engine, run_id, "effect.reconciliation_required")
    assert [(e.details["trigger"], e.details["recovery"]) for e in ev] == [("adapter", "query")]
    cmd = command_of(engine, run_id)
    assert cmd.attempts == 1  # never retried blindly with another identity
    assert demo.draft_count(draft_id=did) == 1


def test_probe_11_uncertain_write_by_timeout(engine, client, demo, draft_worker):
    did = uid("d")
    demo.set_fault("save_draft", "slow_after_commit", delay_s=20)
    run_id = client.start_run(spec([draft(did), sc.final("x", "tool-1")]))
    info = client.wait(run_id, timeout=30, until={"reconciling", "failed", "completed"})
    assert info.status == "reconciling"
    ev = facts.events(engine, run_id, "effect.reconciliation_required")
    assert ev[0].details["trigger"] == "timeout"
    assert demo.draft_count(draft_id=did) == 1


def test_probe_12_write_cancelled_in_flight_stays_cancelling(engine, client, demo, draft_worker):
    did = uid("d")
    demo.set_fault("save_draft", "slow_after_commit", delay_s=20)
    run_id = client.start_run(spec([draft(did), draft(uid("d"), pid="p2")]))
    started(engine, run_id)
    wait_for(lambda: demo.draft_count(draft_id=did) == 1, what="committed write")
    assert client.cancel(run_id, by="alice").status == "cancelling"
    wait_for(lambda: facts.outcomes(engine, run_id) == 1, what="outcome")
    info = client.get_run(run_id)
    assert info.status == "cancelling"  # the effect is unknown: not `cancelled` yet
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=run_id).one()
    assert (outcome.status, outcome.code) == ("unknown", "CANCELLED_DURING_EXECUTION")
    ev = facts.events(engine, run_id, "effect.reconciliation_required")
    assert ev[0].details["trigger"] == "cancellation"
    assert facts.commands(engine, run_id) == 1  # no new tool started


def test_probe_13_read_cancelled_in_flight(engine, client, demo, worker):
    demo.set_fault("lookup", "slow", delay_s=20)
    run_id = client.start_run(spec([lookup(), lookup("again", pid="p2")]))
    started(engine, run_id)
    t0 = time.monotonic()
    client.cancel(run_id, by="alice")
    info = client.wait(run_id, timeout=15)
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")
    assert time.monotonic() - t0 < 10
    stopped = facts.events(engine, run_id, "run.stopped")[0]
    assert stopped.details["detail"]["effect"] == "none"
    assert facts.commands(engine, run_id) == 1


def test_probe_14_cancelled_before_any_work(engine, client, worker):
    run_id = client.start_run(spec([lookup()]), publish=False)
    assert client.cancel(run_id, by="alice").status == "cancelled"
    client.publisher.planner(run_id, 1)  # a late message changes nothing
    marker = client.start_run(spec([sc.final("x")]))
    client.wait(marker, timeout=30)
    info = client.get_run(run_id)
    assert (info.status, info.model_calls) == ("cancelled", 0)


# --- the six exercises ----------------------------------------------------------------------


def test_exercise_normal_path(demo, run_to_end, draft_worker):
    did = uid("d")
    info = run_to_end(spec([lookup(), draft(did, pid="p2"), sc.final("ok", "tool-1", "tool-2")]))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.draft_count(draft_id=did) == 1


def test_exercise_invalid_proposal_refused_before_execution(engine, demo, run_to_end):
    calls = demo.call_count("save_draft")
    info = run_to_end(spec([draft("Not A Valid Id!"), sc.final("x", "tool-1")]))
    assert facts.rejection_codes(engine, info.run_id) == ["INVALID_DRAFT_ID"]
    assert demo.call_count("save_draft") == calls
    assert facts.commands(engine, info.run_id) == 0


def test_exercise_read_timeout_has_no_side_effect(engine, demo, run_to_end):
    demo.set_fault("lookup", "slow", delay_s=20)
    info = run_to_end(spec([lookup(), sc.final("x", "tool-1")]))
    assert (info.status, info.stop_reason) == ("failed", "TOOL_FAILED")
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=info.run_id).one()
    assert (outcome.status, outcome.code) == ("failed", "TOOL_TIMEOUT")


# (timeout with an unknown effect: probes 10-11; repeated proposal: probe 3;
#  cancel stops new actions: probes 12-14 and the cancel tests below)


# --- experiments 3 and 4 of 000 ------------------------------------------------------------


def test_experiment_3_postcondition_failure_never_completes(engine, demo, run_to_end, draft_worker):
    # the write happens, its read-back disagrees (the demo service's corrupt_read fault)
    did = uid("d")
    demo.set_fault("save_draft", "corrupt_read", times=3)  # every one of its 3 reads
    info = run_to_end(spec([draft(did), sc.final("saved", "tool-1")]))
    # save_draft declares no compensation: the effect is quarantined with a person
    assert (info.status, info.stop_reason) == ("handoff", "TOOL_POSTCONDITION_FAILED")
    assert demo.draft_count(draft_id=did) == 1  # written once
    assert facts.events(engine, info.run_id, "effect.compensation_required")
    assert not facts.events(engine, info.run_id, "effect.compensated")
    [handoff] = facts.events(engine, info.run_id, "handoff.created")
    with session_scope(engine) as s:
        bundle = s.get(Handoff, handoff.details["handoff_id"]).bundle
    [effect] = bundle["unknown_effects"]
    assert (effect["tool"], effect["code"]) == ("save_draft", "TOOL_POSTCONDITION_FAILED")
    assert not facts.events(engine, info.run_id, "final.validated")  # the final never ran
    [checked] = facts.events(engine, info.run_id, "tool.postcondition.checked")
    assert (checked.details["ok"], checked.details["attempts"]) == (False, 3)


def test_a_late_read_back_is_read_again_within_its_bound(engine, demo, run_to_end, draft_worker):
    # an eventually consistent store: the first read-back disagrees, the second agrees
    did = uid("d")
    demo.set_fault("save_draft", "corrupt_read", times=1)
    info = run_to_end(spec([draft(did), sc.final("saved", "tool-1")]))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    [checked] = facts.events(engine, info.run_id, "tool.postcondition.checked")
    assert (checked.details["ok"], checked.details["attempts"]) == (True, 2)
    assert demo.draft_count(draft_id=did) == 1


def test_experiment_4_cancel_during_a_tool_matches_the_effect_facts(
    engine, client, demo, draft_worker
):
    # Write not yet applied when the cancel arrives: cancelled, no effect.
    did = uid("d")
    demo.set_fault("save_draft", "slow", delay_s=20)
    run_id = client.start_run(spec([draft(did), draft(uid("d"), pid="p2")]))
    started(engine, run_id)
    client.cancel(run_id, by="alice")
    info = client.wait(run_id, timeout=15)
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")
    assert demo.draft_count(draft_id=did) == 0
    names = [e.event for e in facts.events(engine, run_id)]
    assert names.index("cancel.requested") < names.index("tool.completed")
    assert names.count("tool.started") == 1


def test_cancel_while_the_tool_is_still_logging_its_call_is_known_harmless(
    engine, client, demo, draft_worker
):
    # The revoke's signal can reach the tool at any line: here, while the service is still
    # logging the call (held by a table lock), before anything was sent. The adapter knows
    # the write did not happen: cancelled, no effect, no reconciliation.
    from sqlalchemy import text

    did = uid("d")
    with demo.engine.connect() as holder:
        holder.execute(text("LOCK TABLE demo_calls IN EXCLUSIVE MODE"))
        run_id = client.start_run(spec([draft(did), draft(uid("d"), pid="p2")]))
        started(engine, run_id)
        wait_for(
            lambda: _waiting_on_lock(engine, "demo_calls"),
            what="the tool's call log waiting on the lock",
        )
        client.cancel(run_id, by="alice")
        info = client.wait(run_id, timeout=15)
        holder.rollback()
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=run_id).one()
    assert outcome.code == "CANCELLED_BEFORE_WRITE"
    assert demo.draft_count(draft_id=did) == 0


def test_a_tool_that_saw_the_cancel_is_not_interrupted_while_it_stops(
    engine, client, worker, tmp_path
):
    # The cancel's ledger flag and its signal race. Here the flag wins: the tool reads it and
    # reports nothing was written, and the signal lands while it is still closing its session.
    # The known outcome stands (before: the signal replaced it with an unknown effect and the
    # run stayed cancelling until the reconciler came).
    journal = tmp_path / "journal"
    run_id = client.start_run(
        sc.spec([stopping.proposal("p1", journal)], grants=[{"capability": stopping.CAPABILITY}])
    )
    wait_for(lambda: "started" in stopping.journal_lines(journal), what="the call started")
    client.cancel(run_id, by="alice", revoke=False)  # the ledger flag alone
    wait_for(lambda: "tidying" in stopping.journal_lines(journal), what="the tool saw the cancel")
    client.publisher.revoke_run(run_id, terminate=True)  # the signal, during the tidy-up
    info = client.wait(run_id, timeout=15)
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=run_id).one()
    assert (outcome.status, outcome.code) == ("failed", "CANCELLED_BEFORE_WRITE")
    assert not facts.events(engine, run_id, "effect.reconciliation_required")


def _waiting_on_lock(engine, table: str) -> bool:
    from sqlalchemy import text

    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query ILIKE :q"
                ),
                {"q": f"INSERT INTO {table}%"},
            ).scalar_one()
        )


# --- cancellation ---------------------------------------------------------------------------


def test_cancel_while_queued_discards_the_command(engine, client, demo, draft_worker):
    demo.set_fault("save_draft", "slow", delay_s=2.0)
    busy = client.start_run(spec([draft(uid("busy")), sc.final("x", "tool-1")]))
    started(engine, busy)
    did = uid("q")
    queued = client.start_run(spec([draft(did)]))
    wait_for(
        lambda: (c := command_of(engine, queued)) is not None and c.status == "issued",
        what="queued command",
    )
    assert client.cancel(queued, by="alice").status == "cancelled"
    assert client.wait(busy, timeout=30).status == "completed"
    marker = client.start_run(spec([draft(uid("m")), sc.final("x", "tool-1")]))
    assert client.wait(marker, timeout=30).status == "completed"  # the queue moved past it
    assert command_of(engine, queued).status == "discarded"
    assert not facts.events(engine, queued, "tool.started")
    assert demo.draft_count(draft_id=did) == 0


def test_cancel_that_no_worker_heard_still_stops_the_tool(engine, client, demo, draft_worker):
    did = uid("d")
    demo.set_fault("save_draft", "slow", delay_s=20)
    run_id = client.start_run(spec([draft(did), draft(uid("d"), pid="p2")]))
    started(engine, run_id)
    client.cancel(run_id, by="alice", revoke=False)  # no broadcast at all
    info = client.wait(run_id, timeout=15)
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=run_id).one()
    assert outcome.code == "CANCELLED_BEFORE_WRITE"
    assert demo.draft_count(draft_id=did) == 0
    assert facts.commands(engine, run_id) == 1


def test_cancel_of_a_finished_run_is_refused(client, run_to_end):
    from warrant.runner.errors import StateConflict

    info = run_to_end(spec([sc.final("x")]))
    with pytest.raises(StateConflict) as caught:
        client.cancel(info.run_id, by="alice")
    assert caught.value.code == "RUN_NOT_CANCELLABLE"


# --- at-least-once delivery -----------------------------------------------------------------


def _kill_pool(worker) -> int:
    children = psutil.Process(worker.proc.pid).children(recursive=True)
    for child in children:
        os.kill(child.pid, signal.SIGKILL)
    return len(children)


def test_sigkill_mid_write_redelivers_and_the_effect_happens_once(
    engine, client, demo, draft_worker
):
    did = uid("kill")
    demo.set_fault("save_draft", "slow_after_commit", delay_s=20)
    run_id = client.start_run(spec([draft(did), sc.final("x", "tool-1")]))
    started(engine, run_id)
    wait_for(lambda: demo.draft_count(draft_id=did) == 1, what="committed write")
    calls = demo.call_count("save_draft")
    assert _kill_pool(draft_worker) >= 1
    info = client.wait(run_id, timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.draft_count(draft_id=did) == 1  # exactly one effect
    assert demo.call_count("save_draft") == calls + 1  # re-invoked with the same token
    cmd = command_of(engine, run_id)
    assert cmd.attempts == 2 and facts.outcomes(engine, run_id) == 1


def test_sigkill_mid_non_idempotent_write_records_unknown(engine, client, demo, draft_worker):
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "slow_after_commit", delay_s=20)
    run_id = client.start_run(spec([refund(order), sc.final("x", "tool-1")]))
    started(engine, run_id)
    wait_for(lambda: demo.refund_count(order_id=order) == 1, what="committed refund")
    _kill_pool(draft_worker)
    info = client.wait(run_id, timeout=60, until={"reconciling", "completed", "failed"})
    assert (info.status, info.stop_reason) == ("reconciling", "UNKNOWN_EFFECT")
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=run_id).one()
    assert (outcome.status, outcome.code) == ("unknown", "WORKER_LOST_DURING_EXECUTION")
    assert demo.refund_count(order_id=order) == 1


def test_a_redelivered_finished_command_only_re_emits(engine, client, demo, draft_worker):
    did = uid("d")
    info = client.wait(client.start_run(spec([draft(did), sc.final("x", "tool-1")])), timeout=30)
    cmd = command_of(engine, info.run_id)
    client.publisher.tool(
        run_id=info.run_id,
        version=info.version,
        command_id=cmd.id,
        tool="save_draft",
        soft_time_limit=3,
        time_limit=8,
    )
    marker = client.start_run(spec([draft(uid("m")), sc.final("x", "tool-1")]))
    client.wait(marker, timeout=30)
    assert demo.draft_count(draft_id=did) == 1
    assert facts.outcomes(engine, info.run_id) == 1
    assert client.get_run(info.run_id).version == info.version


# --- retries --------------------------------------------------------------------------------


def test_retry_with_backoff_inside_the_deadline(engine, demo, run_to_end):
    demo.set_fault("lookup", "transient", times=2)
    info = run_to_end(spec([lookup(), sc.final("x", "tool-1")]))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert info.tool_calls == 3  # every attempt counts
    scheduled = facts.events(engine, info.run_id, "tool.retry.scheduled")
    assert [e.details["attempt"] for e in scheduled] == [2, 3]
    assert scheduled[0].details["delay_s"] <= 0.2 and scheduled[1].details["delay_s"] <= 0.4
    assert command_of(engine, info.run_id).attempts == 3


def test_retry_honours_retry_after(engine, demo, run_to_end):
    demo.set_fault("lookup", "transient", retry_after_s=0.6)
    info = run_to_end(spec([lookup(), sc.final("x", "tool-1")]))
    assert info.status == "completed"
    done, again = (
        facts.events(engine, info.run_id, "tool.completed")[0],
        facts.events(engine, info.run_id, "tool.started")[1],
    )
    assert facts.events(engine, info.run_id, "tool.retry.scheduled")[0].details["delay_s"] == 0.6
    assert (again.created_at - done.created_at).total_seconds() >= 0.55


def test_retry_refused_when_the_deadline_would_pass(engine, demo, run_to_end):
    demo.set_fault("lookup", "transient", retry_after_s=30)
    plan = [lookup(), sc.final("cites a failure", "tool-1")]
    info = run_to_end(spec(plan, deadline_s=8, max_refused_finals=0))
    refused = facts.events(engine, info.run_id, "tool.retry.refused")
    assert [e.details["reason"] for e in refused] == ["deadline"]
    assert info.tool_calls == 1
    # A failed result is not evidence: the final answer citing it is refused.
    assert info.stop_reason == "FINAL_CITATION_VALIDATION_FAILED"


def test_retries_count_against_the_tool_call_budget(engine, demo, run_to_end):
    demo.set_fault("lookup", "transient", times=5)
    info = run_to_end(spec([lookup(), sc.final("x", "tool-1")], max_tool_calls=2))
    assert info.tool_calls == 2
    refused = facts.events(engine, info.run_id, "tool.retry.refused")
    assert [e.details["reason"] for e in refused] == ["budget"]


@pytest.mark.parametrize(
    ("mode", "status", "code", "stop"),
    [
        ("fail", "failed", "RESOURCE_NOT_FOUND", "TOOL_FAILED"),
        ("reject", "rejected", "REQUEST_REFUSED", "CLARIFICATION_REQUIRED"),
        ("crash", "failed", "TOOL_INTERNAL_ERROR", "TOOL_INTERNAL_ERROR"),
    ],
)
def test_permanent_failures_refusals_and_bugs_are_never_retried(
    engine, demo, run_to_end, mode, status, code, stop
):
    demo.set_fault("lookup", mode, times=5)
    info = run_to_end(spec([lookup(), {"kind": "clarify", "question": "?"}]))
    assert info.stop_reason == stop
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=info.run_id).one()
    assert (outcome.status, outcome.code, outcome.attempt) == (status, code, 1)
    assert not facts.events(engine, info.run_id, "tool.retry.scheduled")
    assert info.tool_calls == 1


@pytest.mark.parametrize("mode", ["reject", "fail"])
def test_the_fake_answers_an_applied_key_from_its_store_not_with_a_refusal(demo, mode):
    """The demo service fails as a payment API does: a refusal or a missing resource is decided
    on a key's first request; a retry of a key that took effect gets the stored answer (the
    chaos campaign's seed 16 once saw a lost attempt's retry refused after its effect)."""
    from warrant.tools import ToolFailed, ToolRejected

    key, did = f"k_{uuid.uuid4().hex[:10]}", uid("replayed")
    first = demo.save_draft(key=key, draft_id=did, content="hello")
    demo.set_fault("save_draft", mode, times=2)
    assert demo.save_draft(key=key, draft_id=did, content="hello") == first
    assert demo.draft_count(draft_id=did) == 1
    with pytest.raises((ToolRejected, ToolFailed)):  # a new key is still refused
        demo.save_draft(key=f"{key}-new", draft_id=uid("new"), content="hello")
    assert demo.draft_count() >= 1


# --- scaling --------------------------------------------------------------------------------


def test_several_tool_processes_share_one_queue(engine, client, demo, services, tmp_path):
    from tests.conftest import WorkerProcess

    extra = WorkerProcess(
        ["tool.lookup"], name="lookup-extra", concurrency=1, log=tmp_path / "extra.log"
    )
    try:
        extra.wait_ready()
        demo.set_fault("lookup", "slow", times=8, delay_s=0.4)
        runs = [
            client.start_run(spec([lookup(f"q{i}"), sc.final("x", "tool-1")])) for i in range(8)
        ]
        for run_id in runs:
            assert client.wait(run_id, timeout=60).status == "completed"
        with session_scope(engine) as s:
            workers = {c.worker for c in s.query(Command).filter(Command.run_id.in_(runs))}
        assert any(w.startswith("lookup-extra@") for w in workers)
        assert any(w.startswith("pipeline@") for w in workers)
    finally:
        extra.stop()


def test_an_output_over_its_bound_is_kept_cut_with_a_marker(engine, client, worker):
    """``big_listing`` answers 1000 rows (~100 KB), over its 4 KiB ``max_output_bytes``: the
    call succeeds, the ledger and the planner's observation keep its small fields whole, the
    rows' first ones only, and ``_truncated`` (original size, SHA-256 of the whole); the
    trace says so with sizes only. A small answer is kept whole."""
    from warrant.ledger.models import Observation
    from warrant.runner.canonical import canonical_json, content_hash

    big = {**lookup(), "tool": "big_listing", "arguments": {"rows": 1000}}
    small = {**big, "proposal_id": "p2", "arguments": {"rows": 3}}
    outputs = [big, small, sc.final("listed", "tool-1")]
    run_id = client.start_run(sc.spec(outputs, grants=[{"capability": "typed:read"}]))
    info = client.wait(run_id, timeout=60)
    assert (info.status, info.tool_calls) == ("completed", 2), info
    whole = {"count": 1000, "next_page": "p2", "rows": [f"{n:06d}" + "x" * 94 for n in range(1000)]}
    with session_scope(engine) as s:
        outcomes = s.query(OutcomeRow).filter_by(run_id=run_id).order_by(OutcomeRow.id).all()
        cut, kept = (dict(o.output or {}) for o in outcomes)
        seen = s.query(Observation).filter_by(run_id=run_id, observation_id="tool-1").one()
        observed = dict(seen.content["output"])
    assert [o.status for o in outcomes] == ["succeeded", "succeeded"]
    marker = cut.pop("_truncated")
    assert marker["truncated"] is True and marker["cut"] == ["rows"]
    assert marker["original_bytes"] > 100_000 and marker["sha256"] == content_hash(whole)
    assert (cut["count"], cut["next_page"]) == (1000, "p2")  # small fields whole
    assert 0 < len(cut["rows"]) < 40 and cut["rows"] == whole["rows"][: len(cut["rows"])]
    assert len(canonical_json(outcomes[0].output)) <= 4_096
    assert observed == outcomes[0].output  # what the planner sees is what the ledger keeps
    [event] = facts.events(engine, run_id, "tool.output.truncated")
    assert event.details["original_bytes"] == marker["original_bytes"]
    assert "_truncated" not in kept and len(kept["rows"]) == 3
