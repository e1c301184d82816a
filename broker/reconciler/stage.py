"""The reconciler sweep: nothing stays unknown or stuck.

Each sweep holds a PostgreSQL advisory lock, so however many beat processes schedule it and
however many reconciler workers run it, one sweep acts at a time; every step re-checks its
row under a lock, so a sweep is idempotent. The lock is transaction-scoped, in a transaction
the server ends once it has been idle for ``sweep_lock_timeout_s``: a reconciler that
vanishes mid-sweep holds it that long at most (:func:`warrant.ledger.sweeps.sweep_lock`); one
that finds it lost stops before its next item (``lost`` in the report). Each category is
found by an indexed query on status and limited to a batch: a sweep costs what it finds, not
the size of the ledger.

1. stale commands: ``started`` past time limit + lease margin, no outcome -> ``unknown``
2. unknown effects: ask the tool's ``reconcile(token)`` -> continue, retry with the *same*
   token, back off, or hand off to a person
3. stalled runs: no progress for ``stall_after_s`` -> re-publish the message the state expects
4. expired confirmations: waiting past the request's expiry -> cancelled
   (``CONFIRMATION_EXPIRED``), or past the run deadline -> failed (``DEADLINE_REACHED``, as
   every deadline; not for a run whose deadline pauses while a person is asked)
5. webhooks: due deliveries are sent and recorded (:mod:`warrant.broker.reconciler._webhooks`)
6. waiting jobs: a long-running tool's accepted job is polled to its end, cancelled when its
   run is (:mod:`warrant.broker.reconciler._job_polls`)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

from warrant.broker import telemetry
from warrant.broker.context import StageContext
from warrant.broker.publish import Outbox, log_deferred
from warrant.broker.reconciler._effects import reconcile_unknown_effects
from warrant.broker.reconciler._job_polls import poll_waiting_jobs
from warrant.broker.reconciler._webhooks import deliver_webhooks
from warrant.broker.tool.record import finish_branch
from warrant.broker.transitions import HARD_LIMIT_GRACE_S, tool_message
from warrant.ledger import rows, sweeps
from warrant.ledger.db import session_scope
from warrant.ledger.repo import NewObservation, append_events, commit, record_outcome, run_view
from warrant.ledger.row_updates import finish_command, note_republished
from warrant.ledger.stage_loads import artifacts_made_by
from warrant.runner import run_machine as machine
from warrant.runner.codes import (
    CommandStatus,
    ObservationKind,
    Outcome,
    Phase,
    RunStatus,
    StopReason,
)
from warrant.runner.confirmation_rules import confirmation_wait_over
from warrant.runner.errors import BrokerUnavailable
from warrant.runner.fan_in import FanOut
from warrant.runner.handoff import artifacts_made, with_artifacts
from warrant.runner.run_machine import Stop
from warrant.runner.settings import WarrantSettings, load_settings
from warrant.runner.tool_outcomes import ToolResult
from warrant.tools._contract import SideEffect

__all__ = ["JOB_POLL_BUSY_S", "JOB_POLL_LOCK", "SWEEP_LOCK", "SweepReport", "poll_jobs", "sweep"]

log = logging.getLogger("warrant.reconciler")

#: pg advisory lock key of the sweep ("WRRC").
SWEEP_LOCK = 0x5752_5243
#: pg advisory lock key of the job polls ("WRJP"), the sweep's or a job's own (:func:`poll_jobs`).
JOB_POLL_LOCK = 0x5752_4A50
#: A job poll that found another running is sent again this many seconds later.
JOB_POLL_BUSY_S = 1.0


@dataclass
class SweepReport:
    locked: bool = True
    lost: bool = False
    """The lock ended under the sweep, which stopped (see :func:`sweeps.sweep_lock`)."""
    stale: int = 0
    applied: int = 0
    retried: int = 0
    not_applied: int = 0
    still_unknown: int = 0
    handed_off: int = 0
    jobs_settled: int = 0
    jobs_waiting: int = 0
    republished: int = 0
    expired: int = 0
    webhooks_delivered: int = 0
    webhooks_failed: int = 0
    duration_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sweep(
    ctx: StageContext, settings: WarrantSettings | None = None, *, jobs_only: bool = False
) -> SweepReport:
    """One sweep under the cluster's one sweep lock (another running: ``locked`` False).
    ``jobs_only``: the due job polls alone (:func:`poll_jobs`). Job polls hold a lock of their
    own (:data:`JOB_POLL_LOCK`): a sweep is never skipped for them, and it leaves them to a
    job poll that is running."""
    settings = settings or load_settings()
    t0 = time.perf_counter()
    report = SweepReport()
    ctx = _in_run_traces(ctx)
    key = JOB_POLL_LOCK if jobs_only else SWEEP_LOCK
    with sweeps.sweep_lock(ctx.engine, key, timeout_s=settings.sweep_lock_timeout_s) as lock:
        if not lock.held:
            return SweepReport(locked=False)
        try:
            if jobs_only:
                poll_waiting_jobs(ctx, settings, report, lock.check)
            else:
                for part in (
                    _stale_commands,
                    reconcile_unknown_effects,
                    _stalled_runs,
                    _expired_confirmations,
                    _expired_grant_waits,
                    _job_polls,
                ):
                    part(ctx, settings, report, lock.check)
                    lock.check()
                sent = deliver_webhooks(ctx, settings)
                report.webhooks_delivered, report.webhooks_failed = sent.delivered, sent.failed
        except sweeps.SweepLockLost:
            log.warning("the sweep lost its lock (frozen or cut off too long): stopped")
            report.lost = True
    report.duration_ms = round((time.perf_counter() - t0) * 1000, 2)
    return report


def poll_jobs(ctx: StageContext, run_id: str) -> SweepReport:
    """The due job polls, as soon as a job may have moved: a message
    (:meth:`~warrant.broker.publish.Publisher.poll_jobs`) follows each accepted job and each
    poll that found it still running, ``JobHooks.interval_s`` later, so that a job done or a
    sub-run ended moves its run on within about that long rather than at the next sweep. When
    another job poll holds the lock, this one is sent again :data:`JOB_POLL_BUSY_S` later (the
    jobs it was sent for may not have been due when that one read them)."""
    report = sweep(ctx, jobs_only=True)
    if not report.locked:
        try:
            ctx.publisher.poll_jobs(run_id, countdown=JOB_POLL_BUSY_S)
        except BrokerUnavailable as exc:
            log_deferred(exc)  # the next sweep polls them
    return report


def _job_polls(
    ctx: StageContext, settings: WarrantSettings, report: SweepReport, check: Callable[[], None]
) -> None:
    """The sweep's job polls, unless a job poll is running (it polls them)."""
    timeout_s = settings.sweep_lock_timeout_s
    with sweeps.sweep_lock(ctx.engine, JOB_POLL_LOCK, timeout_s=timeout_s) as jobs:
        if not jobs.held:
            return

        def both() -> None:
            check()
            jobs.check()

        poll_waiting_jobs(ctx, settings, report, both)


def _in_run_traces(ctx: StageContext) -> StageContext:
    """The sweep's context, publishing every message in its run's trace (the run's recorded
    ``trace_id``) rather than the sweep's own: a stalled run re-published, a command retried
    after reconciliation, an effect found applied — the run stays one trace."""
    if not telemetry.enabled():
        return ctx

    def trace_of(run_id: str) -> str | None:
        with session_scope(ctx.engine) as s:
            return sweeps.run_trace_id(s, run_id)

    publisher: Any = telemetry.RunTracedPublisher(ctx.publisher, trace_of)
    return replace(ctx, publisher=publisher)


# --- 1. stale commands -----------------------------------------------------------------------


def _stale_commands(
    ctx: StageContext, settings: WarrantSettings, report: SweepReport, check: Callable[[], None]
) -> None:
    margin = settings.lease_margin_s
    with session_scope(ctx.engine) as s:
        ids = sweeps.stale_commands(
            s,
            extra_s=margin + HARD_LIMIT_GRACE_S,
            limit=settings.sweep_batch,
            heartbeat_timeout_s=settings.lease_heartbeat_timeout_s,
        )
    for command_id in ids:
        check()
        outbox = Outbox()
        with session_scope(ctx.engine) as s:
            cmd = rows.lock_command(s, command_id)
            if cmd is None or cmd.status != CommandStatus.STARTED:
                continue
            run = rows.lock_run(s, cmd.run_id)
            assert run is not None
            _expire(ctx, s, cmd, run, outbox)
            report.stale += 1
        outbox.flush()


def _expire(ctx: StageContext, s: Any, cmd: Any, run: Any, outbox: Outbox) -> None:
    """A started command past its lease: a lost read failed (the planner goes on); a lost
    write's effect is unknown (the reconciler asks the tool)."""
    tool = ctx.registry.get(cmd.tool, cmd.tool_version)
    read = tool is not None and tool.side_effect is SideEffect.READ
    record_outcome(
        s,
        command_id=cmd.id,
        run_id=run.id,
        status="failed" if read else "unknown",
        code="COMMAND_LEASE_EXPIRED",
        retryable=read,
        message="started and never finished (worker lost)",
        attempt=cmd.attempts,
    )
    finish_command(cmd, stamp=True)
    events: list[tuple[str, dict[str, Any]]] = [
        ("command.lease_expired", {"tool": cmd.tool, "attempt": cmd.attempts})
    ]
    view = run_view(run)
    if cmd.branch and tool is not None:  # a parallel step's call: its step's rule goes on
        _expire_branch(ctx, s, run, cmd, tool, read=read, events=events, outbox=outbox)
        return
    if read:
        # A lost read changed nothing: the planner sees the failure and goes on.
        if view.status is RunStatus.RUNNING:
            v = commit(
                s,
                machine.replan(view, why=events),
                step=cmd.step,
                proposal_id=cmd.proposal_id,
                observation=NewObservation(
                    f"tool-{cmd.step}",
                    ObservationKind.TOOL_RESULT,
                    "trusted-tool",
                    {"tool": cmd.tool, "status": "failed", "code": "COMMAND_LEASE_EXPIRED"},
                ),
            )
            outbox.add(partial(ctx.publisher.planner, run.id, v))
        else:
            change = machine.finish_cancel(view, effect="none", step=cmd.step, events=events)
            commit(s, change, step=cmd.step)
    else:
        required = {
            "tool": cmd.tool,
            "trigger": "lease-expired",
            "recovery": "query" if tool and tool.reconcile else "human",
        }
        change = machine.enter_reconciliation(view, required=required, events=events)
        commit(s, change, step=cmd.step, proposal_id=cmd.proposal_id)


def _expire_branch(
    ctx: StageContext,
    s: Any,
    run: Any,
    cmd: Any,
    tool: Any,
    *,
    read: bool,
    events: list[tuple[str, dict[str, Any]]],
    outbox: Outbox,
) -> None:
    """A parallel step's call past its lease: its outcome goes through the step's merge rule
    (``broker.tool.record.finish_branch``), as the call's own record would have."""
    status = Outcome.FAILED if read else Outcome.UNKNOWN
    lost = ToolResult(
        status,
        "COMMAND_LEASE_EXPIRED",
        "started and never finished (worker lost)",
        trigger="lease-expired",
        events=events,
    )
    completed = {
        "tool": cmd.tool,
        "status": status.value,
        "code": lost.code,
        "attempt": cmd.attempts,
        "duration_ms": None,
    }
    finish_branch(ctx, s, run, cmd, tool, lost, ("tool.completed", completed), outbox)


# --- 3. stalled runs -------------------------------------------------------------------------

#: The longest wait between two re-publishes of one stalled run at one version (or
#: ``stall_after_s`` if that is longer).
REPUBLISH_CAP_S = 60.0


def republish_wait_s(stall_after_s: float, republished: int) -> float:
    """How long a run must have stalled before its next re-publish, after ``republished``
    re-publishes of its current version: ``stall_after_s``, then doubling, capped (a message
    nobody takes is not copied into its queue every ``stall_after_s`` for as long as the
    workers are away)."""
    return min(stall_after_s * 2.0 ** min(republished, 30), max(stall_after_s, REPUBLISH_CAP_S))


def _stalled_runs(
    ctx: StageContext, settings: WarrantSettings, report: SweepReport, check: Callable[[], None]
) -> None:
    with session_scope(ctx.engine) as s:
        ids = sweeps.stalled_runs(
            s, older_than_s=settings.stall_after_s, limit=settings.sweep_batch
        )
    for run_id in ids:
        check()
        outbox = Outbox()
        with session_scope(ctx.engine) as s:
            run = rows.lock_run(s, run_id)
            if run is None or run.status != RunStatus.RUNNING:
                continue
            version, phase = run.version, run.phase
            republished = run.republish_count if run.republish_version == version else 0
            waited = ctx.clock() - sweeps.quiet_since(run)  # a wait counts from its wake
            if waited < republish_wait_s(settings.stall_after_s, republished):
                continue
            message = _message_of(ctx, settings, s, run)
            if message is None:
                continue
            outbox.add(message)
            sweeps.touch_run(s, run_id)
            note_republished(run, version=version, count=republished + 1)
            details = {"phase": phase, "version": version, "attempt": republished + 1}
            append_events(s, run_id, [("run.republished", details)], step=run.step)
            report.republished += 1
        outbox.flush()


def _message_of(
    ctx: StageContext, settings: WarrantSettings, s: Any, run: Any
) -> Callable[[], Any] | None:
    """The message that carries a stalled ``run`` on from its phase (None: nothing to
    re-publish: a tool command still within its lease, or no command). ``ctx.publisher``
    publishes in the run's trace (see ``_in_run_traces``)."""
    if run.phase == Phase.PLANNING:
        return partial(ctx.publisher.planner, run.id, run.version)
    if run.phase == Phase.POLICY:
        return partial(ctx.publisher.policy, run.id, run.version)
    if run.phase != Phase.TOOL or not run.active_command_id:
        return None
    ids = [run.active_command_id]
    if run.fan_out:  # a parallel step: each of its branches
        ids = FanOut.from_json(run.fan_out).command_ids
    sends = []
    for command_id in ids:
        cmd = rows.command(s, command_id)
        if (
            cmd is None
            or cmd.status != CommandStatus.ISSUED
            or cmd.deadline_at.timestamp() + settings.lease_margin_s >= ctx.clock()
        ):
            continue
        sends.append(
            tool_message(ctx, run.id, run.version, cmd.id, cmd.tool, timeout_s=cmd.timeout_s)
        )
    if not sends:
        return None
    return lambda: [send() for send in sends]


# --- 4. expired confirmations ----------------------------------------------------------------


def _expired_confirmations(
    ctx: StageContext, settings: WarrantSettings, report: SweepReport, check: Callable[[], None]
) -> None:
    now = ctx.clock()
    with session_scope(ctx.engine) as s:
        waiting = sweeps.waiting_confirmations(s, limit=settings.sweep_batch * 10)
    due = [
        (rid, stop)
        for rid, req, dl in waiting
        if (stop := confirmation_wait_over(req or {}, deadline_at=dl.timestamp(), now=now))
    ]
    for run_id, stop in due[: settings.sweep_batch]:
        check()
        with session_scope(ctx.engine) as s:
            run = rows.lock_run(s, run_id)
            if run is None or run.status != RunStatus.WAITING_CONFIRMATION:
                continue
            expired = ("confirmation.expired", {"reason": stop.reason.value})
            stop = with_artifacts(stop, artifacts_made(artifacts_made_by(s, run_id)))
            change = machine.stop(run_view(run), stop, step=run.step, events=[expired])
            commit(s, change, step=run.step)
            report.expired += 1


def _expired_grant_waits(
    ctx: StageContext, settings: WarrantSettings, report: SweepReport, check: Callable[[], None]
) -> None:
    """A run waiting for a grant past its deadline stops as every deadline ends a run:
    ``failed``, ``DEADLINE_REACHED``, nothing ran (an operator's grant is not a confirmation:
    the deadline does not pause for it)."""
    now = ctx.clock()
    with session_scope(ctx.engine) as s:
        due = sweeps.waiting_grants_due(s, now=now, limit=settings.sweep_batch)
    for run_id in due:
        check()
        with session_scope(ctx.engine) as s:
            run = rows.lock_run(s, run_id)
            if run is None or run.status != RunStatus.WAITING_GRANT:
                continue
            if run.deadline_at.timestamp() > now:
                continue
            reason = StopReason.DEADLINE_REACHED
            stop = Stop(RunStatus.FAILED, reason, {"effect": "none"})
            stop = with_artifacts(stop, artifacts_made(artifacts_made_by(s, run_id)))
            expired = ("grant.wait_expired", {"reason": reason.value})
            change = machine.stop(run_view(run), stop, step=run.step, events=[expired])
            commit(s, change, step=run.step)
            report.expired += 1
