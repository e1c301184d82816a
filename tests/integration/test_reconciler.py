"""Reconciler, stalled-run recovery and human handoff, on real workers and services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime

import pytest
from sqlalchemy import func, select, text
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import RECONCILER_ENV, wait_for
from tests.integration.test_cli import warrant
from tests.integration.test_gate_pipeline import save
from tests.integration.test_tool_execution import command_of, draft, refund, spec, started, uid
from warrant.broker.queues import TASK_RECONCILE
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, OutcomeRow, Reconciliation, Run

pytestmark = [pytest.mark.services, pytest.mark.slow]

NOTICES = {"capability": "notices:send"}


def notice(recipient: str, pid: str = "p1"):
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "send_notice",
        "tool_version": "1",
        "arguments": {"recipient": recipient, "body": "Your refund is on its way."},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def pre_approved(proposal: dict, by: str = "ops@example.com") -> dict:
    """A pre-approval of exactly ``proposal`` (a notice is irreversible: it needs one, or a
    person's confirmation, to run unattended)."""
    return {
        "tool": proposal["tool"],
        "tool_version": proposal["tool_version"],
        "arguments": proposal["arguments"],
        "approved_by": by,
    }


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


def sweep_now(client) -> None:
    """Ask the reconciler worker for one sweep (what beat does on its schedule)."""
    client.publisher.app.send_task(TASK_RECONCILE)


def settle(
    client,
    run_id: str,
    *,
    until=("completed", "failed", "cancelled", "handoff"),
    timeout: float = 30.0,
):
    """Trigger sweeps until the run reaches one of ``until`` (a deadline, not a sleep)."""
    end = time.monotonic() + timeout
    while True:
        info = client.get_run(run_id)
        if info.status in until:
            return info
        assert time.monotonic() < end, f"run stuck: {info}"
        sweep_now(client)
        client.wait(run_id, timeout=0.7, until=set(until))


def reconciliations(engine, run_id: str) -> list[str]:
    with session_scope(engine) as s:
        return [
            r.result
            for r in s.query(Reconciliation).filter_by(run_id=run_id).order_by(Reconciliation.id)
        ]


def test_timeout_after_commit_is_reconciled_as_applied(
    engine, client, demo, draft_worker, reconciler_worker
):
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "timeout_after_commit")
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")]))
    assert client.wait(run_id, timeout=30, until={"reconciling"}).status == "reconciling"
    info = settle(client, run_id)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.refund_count(order_id=order) == 1  # exactly one refund
    assert reconciliations(engine, run_id) == ["applied"]
    tool_obs = [o for o in client.observations(run_id) if o["observation_id"] == "tool-1"]
    assert tool_obs[0]["content"]["reconciled"] is True
    assert command_of(engine, run_id).attempts == 1  # never re-sent


def test_timeout_before_commit_is_retried_with_the_same_token(
    engine, client, demo, draft_worker, reconciler_worker
):
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "timeout_before_commit")
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")]))
    client.wait(run_id, timeout=30, until={"reconciling"})
    assert demo.refund_count(order_id=order) == 0
    info = settle(client, run_id)
    assert info.status == "completed"
    assert demo.refund_count(order_id=order) == 1
    assert reconciliations(engine, run_id) == ["not_applied"]
    with session_scope(engine) as s:
        commands = s.query(Command).filter_by(run_id=run_id).all()
        outcomes = [
            (o.attempt, o.status, o.resolved_status)
            for o in s.query(OutcomeRow).filter_by(run_id=run_id).order_by(OutcomeRow.attempt)
        ]
    assert len(commands) == 1 and commands[0].attempts == 2  # one command, one token
    assert outcomes == [(1, "unknown", "not_applied"), (2, "succeeded", None)]
    assert info.tool_calls == 2


def test_an_unclassified_error_of_a_write_is_unknown_and_never_retried(
    engine, client, demo, draft_worker, reconciler_worker
):
    # The adapter broke with an exception it did not classify: the write may have been sent,
    # so the effect is unknown (not "failed"); the reconciler finds it not applied, and the run
    # stops TOOL_INTERNAL_ERROR instead of sending the same broken call again.
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "crash", times=5)
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")]))
    client.wait(run_id, timeout=30, until={"reconciling"})
    info = settle(client, run_id)
    assert (info.status, info.stop_reason) == ("failed", "TOOL_INTERNAL_ERROR")
    assert reconciliations(engine, run_id) == ["not_applied"]
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=run_id).one()
        assert (outcome.status, outcome.code, outcome.resolved_status) == (
            "unknown",
            "TOOL_INTERNAL_ERROR",
            "not_applied",
        )
    assert command_of(engine, run_id).attempts == 1  # never re-sent
    assert demo.refund_count(order_id=order) == 0


def test_a_not_applied_effect_is_retried_only_within_the_tools_max_attempts(
    engine, client, demo, draft_worker, reconciler_worker
):
    # issue_refund allows 3 attempts: each times out before the service commits, the
    # reconciler finds it not applied and retries; the third "not applied" stops the run.
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "timeout_before_commit", times=10)
    run_id = client.start_run(
        spec([refund(order), sc.final("Refunded.", "tool-1")], max_tool_calls=10)
    )
    info = settle(client, run_id, timeout=60)
    assert (info.status, info.stop_reason) == ("failed", "TOOL_FAILED")
    with session_scope(engine) as s:
        assert s.get(Run, run_id).stop_detail["code"] == "NOT_APPLIED_MAX_ATTEMPTS"
    assert reconciliations(engine, run_id) == ["not_applied"] * 3
    assert command_of(engine, run_id).attempts == 3
    assert demo.refund_count(order_id=order) == 0


def test_a_tool_without_reconcile_is_handed_to_a_person(
    engine, client, demo, draft_worker, reconciler_worker
):
    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    demo.set_fault("send_notice", "timeout_after_commit")
    run_spec = spec([notice(recipient), sc.final("Sent.", "tool-1")], grants=[NOTICES])
    run_spec["pre_approved"] = [pre_approved(notice(recipient))]
    run_id = client.start_run(run_spec)
    client.wait(run_id, timeout=30, until={"reconciling"})
    info = settle(client, run_id)
    assert (info.status, info.stop_reason) == ("handoff", "UNKNOWN_EFFECT")

    listed = warrant("handoff", "list", "--json")
    assert listed.returncode == 0
    handoff_id = next(h["handoff_id"] for h in json.loads(listed.stdout) if h["run_id"] == run_id)
    shown = json.loads(warrant("handoff", "show", handoff_id, "--json").stdout)
    bundle = shown["bundle"]
    for key in (
        "run_id",
        "state",
        "goal",
        "last_trusted_observations",
        "pending_proposal",
        "required",
        "unknown_effects",
        "recommended_safe_actions",
        "forbidden_automatic_actions",
    ):
        assert bundle[key] is not None and bundle[key] != [], key
    assert bundle["state"]["status"] == "reconciling" and bundle["run_id"] == run_id
    assert bundle["goal"] == sc.GOAL
    assert bundle["pending_proposal"]["tool"] == "send_notice"
    assert bundle["pending_proposal"]["arguments"]["body"] == "<sensitive>"
    assert bundle["required"] == {
        "capabilities": ["notices:send"],
        "confirmation": "never",
        "side_effect": "irreversible",
    }
    effect = bundle["unknown_effects"][0]
    assert effect["reconcilable"] is False
    assert [r["result"] for r in effect["reconciliation_history"]] == ["unsupported"]
    assert "Your refund" not in json.dumps(bundle)  # sensitive argument never copied
    # budgets used and left, a trace pointer, what was made: nothing succeeded yet
    assert bundle["budget"]["tool_calls"] == 1
    assert bundle["budget"]["remaining"]["tool_calls"] == bundle["budget"]["max_tool_calls"] - 1
    seqs = [e.seq for e in facts.events(engine, run_id)]
    assert bundle["trace"]["run_id"] == run_id and bundle["trace"]["last_seq"] in seqs
    assert bundle["trace"]["cli"] == f"warrant run trace {run_id}"
    assert bundle["artifacts"] == [] and bundle["untrusted_observations"] == []
    readable = warrant("handoff", "show", handoff_id)
    assert "forbidden automatic actions" in readable.stdout
    assert f"trace: warrant run trace {run_id}" in readable.stdout

    resolved = warrant(
        "handoff",
        "resolve",
        handoff_id,
        "--outcome",
        "failed",
        "--by",
        "ops",
        "--reason",
        "customer confirmed no notice arrived",
        "--json",
    )
    assert resolved.returncode == 0, resolved.stderr
    after = json.loads(resolved.stdout)
    assert (after["status"], after["stop_reason"]) == ("failed", "RESOLVED_BY_HUMAN")
    assert after["version"] == info.version + 1
    again = warrant(
        "handoff",
        "resolve",
        handoff_id,
        "--outcome",
        "completed",
        "--by",
        "ops",
        "--reason",
        "second try",
        "--json",
    )
    assert again.returncode == 2
    assert json.loads(again.stdout)["error"]["code"] == "HANDOFF_ALREADY_RESOLVED"
    event = facts.events(engine, run_id, "handoff.resolved")[0]
    assert event.details["by"] == "ops" and event.details["outcome"] == "failed"
    assert demo.notice_count(recipient=recipient) == 1


def test_repeated_proposals_go_to_handoff_when_the_spec_asks(engine, client, worker):
    run_spec = sc.spec([sc.search(f"p{i}") for i in range(6)])
    run_spec["handoff"] = {"on_repeated_proposal": True}
    info = client.wait(client.start_run(run_spec), timeout=30)
    assert (info.status, info.stop_reason) == (
        "handoff",
        "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION",
    )
    bundle = client.handoff(info.run_id)["bundle"]
    assert bundle["pending_proposal"]["tool"] == "search_public"
    assert bundle["last_trusted_observations"][0]["observation_id"] == "user-1"


def test_crash_between_commit_and_publish_is_recovered(engine, client, worker, reconciler_worker):
    run_id = client.start_run(
        sc.spec([sc.search("p1"), sc.final("Three retries.", "tool-1")]), publish=False
    )
    # The planner task, run by a real process that dies (os._exit) right after its commit and
    # before its publish: the run's version moved and no message carries it on.
    died = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from warrant.broker.tasks import planner_step; "
            "planner_step(sys.argv[1], 1)",
            run_id,
        ],
        env={**os.environ, "WARRANT_CRASH_POINT": "planner:after_commit"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == 70, died.stderr
    assert facts.events(engine, run_id, "proposal.received")  # the step's commit happened
    info = settle(client, run_id)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.events(engine, run_id, "run.republished")
    assert facts.commands(engine, run_id) == 1 and facts.outcomes(engine, run_id) == 1


def test_a_stale_started_command_is_treated_as_unknown(
    engine, client, demo, draft_worker, reconciler_worker
):
    did = uid("stale")
    demo.set_fault("save_draft", "slow_after_commit", delay_s=30)
    run_id = client.start_run(spec([draft(did), sc.final("x", "tool-1")]))
    started(engine, run_id)
    wait_for(lambda: demo.draft_count(draft_id=did) == 1, what="committed write")
    draft_worker.kill_all()  # the whole worker: the message is neither acked nor requeued
    try:
        info = settle(client, run_id, timeout=40)
    finally:
        draft_worker.restart()
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.events(engine, run_id, "command.lease_expired")
    assert reconciliations(engine, run_id) == ["applied"]
    assert demo.draft_count(draft_id=did) == 1


def test_confirmation_expiry_cancels_the_run(engine, client, worker, reconciler_worker):
    from tests.integration.test_gate_pipeline import memory_spec

    run_id = client.start_run(memory_spec([save()], "expiry-subject", confirmation_ttl_s=0.5))
    info = client.wait(run_id, timeout=30)
    assert info.status == "waiting_confirmation"
    at = datetime.fromisoformat(info.confirmation_request["expires_at"]).timestamp()
    wait_for(lambda: time.time() > at, what="expiry")
    done = settle(client, run_id)
    assert (done.status, done.stop_reason) == ("cancelled", "CONFIRMATION_EXPIRED")


def test_two_beats_reconcile_each_unknown_once(
    engine, client, demo, draft_worker, reconciler_worker, tmp_path
):
    beats = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "warrant.broker.app",
                "beat",
                "-l",
                "warning",
                "--schedule",
                str(tmp_path / f"beat-{i}"),
            ],
            env={**reconciler_worker.env, **RECONCILER_ENV},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    try:
        orders = [f"ord_{uuid.uuid4().hex[:10]}" for _ in range(3)]
        demo.set_fault("issue_refund", "timeout_after_commit", times=3)
        runs = [client.start_run(spec([refund(o), sc.final("ok", "tool-1")])) for o in orders]
        for run_id in runs:  # no manual sweeps: only the two beats schedule them
            assert client.wait(run_id, timeout=60).status == "completed"
    finally:
        for b in beats:
            b.terminate()
            b.wait(10)
    for run_id, order in zip(runs, orders, strict=True):
        assert reconciliations(engine, run_id) == ["applied"]
        assert len(facts.events(engine, run_id, "effect.reconciled")) == 1
        assert demo.refund_count(order_id=order) == 1


def test_the_sweep_lock_admits_one_sweep_at_a_time(engine, services):
    from warrant.broker.context import worker_context
    from warrant.broker.reconciler.stage import SWEEP_LOCK, sweep

    ctx = worker_context()
    with engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": SWEEP_LOCK})
        assert sweep(ctx).locked is False
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": SWEEP_LOCK})
        holder.commit()
    assert sweep(ctx).locked is True  # released: the next sweep runs


def test_job_polls_hold_a_lock_of_their_own_and_never_hold_a_sweep_back(engine, services):
    """A job's poll (sent after its acceptance and after each poll that found it running) and
    the sweep: a running job poll makes another come back later and the sweep leave the jobs
    to it, never skip itself."""
    from dataclasses import replace

    from warrant.broker.context import worker_context
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import JOB_POLL_LOCK, poll_jobs, sweep

    ctx = replace(worker_context(), publisher=RecordingPublisher())
    with engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": JOB_POLL_LOCK})
        assert poll_jobs(ctx, "run-1").locked is False
        assert ctx.publisher.sent == [("poll_jobs", {"run_id": "run-1"})]  # its turn, later
        assert sweep(ctx).locked is True  # the sweep runs, its job polls left to the holder
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": JOB_POLL_LOCK})
        holder.commit()
    assert poll_jobs(ctx, "run-1").locked is True
    assert len(ctx.publisher.sent) == 1  # nothing was waiting: nothing sent again


def test_sweep_cost_does_not_grow_with_finished_runs(engine, services, capsys):
    from warrant.broker.context import worker_context
    from warrant.broker.reconciler.stage import sweep

    ctx = worker_context()

    def timed() -> float:
        best = float("inf")
        for _ in range(5):
            report = sweep(ctx)
            assert report.locked and report.republished == 0 and report.stale == 0
            best = min(best, report.duration_ms)
        return best

    empty = timed()
    with engine.begin() as conn:
        conn.execute(
            text("""
            INSERT INTO runs (id, status, phase, version, step, model_calls, tool_calls,
                              tool_calls_by_tool, observation_version, tokens_used, cost_used,
                              trace_seq, goal, subject, spec, deadline_at, created_at,
                              updated_at, finished_at, stop_reason)
            SELECT 'bulk-' || g, 'completed', 'idle', 3, 2, 2, 1, '{}', 2, 0, 0, 5, 'g', 's',
                   '{}', now(), now() - interval '1 day', now() - interval '1 day',
                   now() - interval '1 day', 'FINAL_ANSWER_VALIDATED'
            FROM generate_series(1, 100000) AS g""")
        )
        conn.execute(text("ANALYZE runs"))
    try:
        full = timed()
        with session_scope(engine) as s:
            n = s.execute(select(func.count()).select_from(Run)).scalar_one()
        assert n >= 100_000
    finally:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM runs WHERE id LIKE 'bulk-%'"))
    with capsys.disabled():
        print(
            f"\n[sweep] empty ledger: {empty:.2f} ms; with 100k finished runs: {full:.2f} ms "
            f"(ratio {full / max(empty, 0.001):.2f})"
        )


def test_a_resolution_needs_a_valid_outcome_and_identity(client, services):
    from warrant.runner.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as caught:
        client.resolve_handoff(str(uuid.uuid4()), outcome="done", by="x", reason="y")
    assert caught.value.code == "INVALID_RESOLUTION"
    with pytest.raises(InvalidRequest) as caught:
        client.resolve_handoff(str(uuid.uuid4()), outcome="failed", by=" ", reason="y")
    assert caught.value.code == "RESOLUTION_IDENTITY_REQUIRED"
