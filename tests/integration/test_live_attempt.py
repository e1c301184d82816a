"""One live attempt per command: a tool message delivered twice while its first attempt runs.

The reproduction: a tool call made slow by the demo service's ``slow`` fault; when its command
is ``started``, the exact message the policy stage sent is published again. A second tool
process picks it up while the first is still inside the call, and the reconciler sweeps twice
a second. Whatever the tool's side-effect class, the ledger must end up saying exactly what
the demo service did: one effect (or none), recorded once, by the attempt that made it.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import DRAFT_QUEUES, LIVE_WORKERS, WorkerProcess, wait_for
from tests.integration.test_reconciler import reconciliations, settle
from tests.integration.test_tool_execution import (
    command_of,
    draft,
    lookup,
    refund,
    spec,
    started,
    uid,
)
from warrant.broker.tool.lease import holder_of
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.db import session_scope
from warrant.ledger.models import OutcomeRow, Run

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture(scope="module")
def racers(services, worker, reconciler_worker, tmp_path_factory) -> Iterator[WorkerProcess]:
    """Two more tool processes on the write queues and ``lookup``: a second delivery finds
    a free process while the first attempt is still running."""
    log = tmp_path_factory.mktemp("logs") / "racers.log"
    # The only consumer of the write queues meanwhile: a redelivery after a killed pool
    # process then lands on the same node, which can tell that the process is gone.
    others = [
        w for w in LIVE_WORKERS if w.proc.poll() is None and set(w.queues) & set(DRAFT_QUEUES)
    ]
    for other in others:
        other.stop()
    proc = WorkerProcess([*DRAFT_QUEUES, "tool.lookup"], name="racers", concurrency=2, log=log)
    try:
        with proc.serving():
            yield proc
    finally:
        for other in others:
            other.restart()


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


def deliver_again(client, engine, run_id: str) -> None:
    """Publish the tool message the policy stage sent, once more, while it is ``started``."""
    started(engine, run_id)
    cmd = command_of(engine, run_id)
    assert cmd.status == "started"
    client.publisher.tool(
        run_id=run_id,
        version=client.get_run(run_id).version,
        command_id=cmd.id,
        tool=cmd.tool,
        soft_time_limit=cmd.timeout_s,
        time_limit=cmd.timeout_s + HARD_LIMIT_GRACE_S,
    )
    wait_for(
        lambda: facts.events(engine, run_id, "tool.delivery.in_flight"),
        what="the second delivery noticed the live attempt",
    )


def outcomes(engine, run_id: str) -> list[tuple[int, str, str | None, str | None]]:
    with session_scope(engine) as s:
        rows = s.query(OutcomeRow).filter_by(run_id=run_id).order_by(OutcomeRow.id).all()
        return [(o.attempt, o.status, o.code, o.resolved_status) for o in rows]


@pytest.mark.parametrize("max_tool_calls", [None, 1], ids=["budget-left", "no-budget-left"])
def test_compensatable_write_delivered_twice_is_recorded_once(
    engine, client, demo, racers, max_tool_calls
):
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "slow", delay_s=3)
    budgets = {} if max_tool_calls is None else {"max_tool_calls": max_tool_calls}
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")], **budgets))
    deliver_again(client, engine, run_id)
    info = settle(client, run_id, timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.refund_count(order_id=order) == 1
    assert outcomes(engine, run_id) == [(1, "succeeded", None, None)]
    assert command_of(engine, run_id).attempts == 1
    assert not facts.events(engine, run_id, "effect.reconciliation_required")


def test_idempotent_write_delivered_twice_runs_once(engine, client, demo, racers):
    did = uid("twice")
    demo.set_fault("save_draft", "slow", delay_s=2)
    run_id = client.start_run(spec([draft(did), sc.final("Saved.", "tool-1")]))
    calls = demo.call_count("save_draft")
    deliver_again(client, engine, run_id)
    info = settle(client, run_id, timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.draft_count(draft_id=did) == 1
    assert demo.call_count("save_draft") == calls + 1  # never re-invoked over the live attempt
    assert outcomes(engine, run_id) == [(1, "succeeded", None, None)]


def test_read_delivered_twice_runs_once(engine, client, demo, racers):
    demo.set_fault("lookup", "slow", delay_s=2)
    run_id = client.start_run(spec([lookup("order 42"), sc.final("Found.", "tool-1")]))
    calls = demo.call_count("lookup")
    deliver_again(client, engine, run_id)
    info = settle(client, run_id, timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.call_count("lookup") == calls + 1
    assert outcomes(engine, run_id) == [(1, "succeeded", None, None)]


def test_cancel_between_the_deliveries_matches_the_effect(engine, client, demo, racers):
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "slow_after_commit", delay_s=3)
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")]))
    deliver_again(client, engine, run_id)
    wait_for(lambda: demo.refund_count(order_id=order) == 1, what="the refund committed")
    client.cancel(run_id, by="test", reason="changed my mind")
    info = settle(client, run_id, timeout=60)
    assert info.status == "cancelled"
    assert demo.refund_count(order_id=order) == 1
    # The ledger knows the refund happened: reconciled as applied, never "not applied".
    with session_scope(engine) as s:
        assert s.get(Run, run_id).stop_detail["effect"] == "applied"
    resolved = [r for _, status, _, r in outcomes(engine, run_id) if status == "unknown"]
    assert resolved in ([], ["applied"])
    assert "not_applied" not in [r for *_, r in outcomes(engine, run_id)]


def test_an_attempt_that_outlived_its_lease_corrects_a_not_applied_verdict(
    engine, client, demo, monkeypatch
):
    """The defence in depth: an attempt still running past its lease (a hard time limit that
    did not fire), declared lost, judged "not applied" with no budget left to retry — and then
    it commits the refund. The ledger must end up saying "applied", and a person must look."""
    import threading

    from sqlalchemy import text

    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.broker.policy.stage import policy_evaluate
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import sweep
    from warrant.broker.tool.stage import tool_execute
    from warrant.runner.settings import WarrantSettings

    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher)
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "slow", delay_s=3)
    run_id = client.start_run(
        spec([refund(order), sc.final("Refunded.", "tool-1")], max_tool_calls=1), publish=False
    )
    publisher.planner(run_id, 1)
    while publisher.sent[0][0] != "tool":
        name, m = publisher.sent.pop(0)
        stage = planner_step if name == "planner" else policy_evaluate
        stage(ctx, m["run_id"], m["version"])
    _, m = publisher.sent.pop(0)
    results: list[str] = []
    late = threading.Thread(
        target=lambda: results.append(
            tool_execute(
                ctx, run_id, m["version"], m["command_id"], worker="w@h/1", tool="issue_refund"
            )
        )
    )
    late.start()
    started(engine, run_id)
    with engine.begin() as conn:  # the attempt is now past its lease
        conn.execute(
            text("UPDATE commands SET started_at = now() - interval '1 hour' WHERE id = :id"),
            {"id": m["command_id"]},
        )
    settings = WarrantSettings(lease_margin_s=0)
    wait_for(lambda: sweep(ctx, settings).locked, what="a sweep of our own")
    wait_for(lambda: client.get_run(run_id).status == "failed", what="judged not applied")
    late.join(30)
    assert results == ["late_handoff"]
    assert demo.refund_count(order_id=order) == 1
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason) == ("handoff", "UNKNOWN_EFFECT")
    assert outcomes(engine, run_id) == [(1, "unknown", "COMMAND_LEASE_EXPIRED", "applied")]
    assert reconciliations(engine, run_id) == ["not_applied", "applied_late"]
    assert facts.events(engine, run_id, "effect.found_late")


def test_a_killed_attempt_is_judged_not_applied_only_after_its_hard_limit(
    engine, client, demo, racers
):
    """The attempt's process is killed inside the call, before the refund: the redelivery
    declares it lost at once (same node, pid gone), but the reconciler only accepts "not
    applied" once the attempt's hard time limit has passed; then the same token is retried."""
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "slow", delay_s=30)
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")]))
    started(engine, run_id)
    holder = holder_of(command_of(engine, run_id).worker)
    assert holder is not None and holder.pid is not None and holder.space is not None
    os.kill(holder.pid, signal.SIGKILL)
    demo.clear_faults()
    info = settle(client, run_id, timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.refund_count(order_id=order) == 1
    assert outcomes(engine, run_id) == [
        (1, "unknown", "WORKER_LOST_DURING_EXECUTION", "not_applied"),
        (2, "succeeded", None, None),
    ]
    assert facts.events(engine, run_id, "effect.reconcile_deferred")
    assert reconciliations(engine, run_id) == ["not_applied"]  # a deferral records no verdict
