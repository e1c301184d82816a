"""The reconciler sweep: nothing stays unknown or stuck.

Each sweep holds a PostgreSQL advisory lock, so however many beat processes schedule it and
however many reconciler workers run it, one sweep acts at a time; every step re-checks its
row under a lock, so a sweep is idempotent. Each category is found by an indexed query on
status and limited to a batch: a sweep costs what it finds, not the size of the ledger.

1. stale commands: ``started`` past time limit + lease margin, no outcome -> ``unknown``
2. unknown effects: ask the tool's ``reconcile(token)`` -> continue, retry with the *same*
   token, back off, or hand off to a person
3. stalled runs: no progress for ``stall_after_s`` -> re-publish the message the state expects
4. expired confirmations: waiting past the request's expiry or the run deadline -> cancelled
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy import and_, func, literal_column, select, update

from warrant.broker.context import StageContext
from warrant.broker.handoffs import enter_handoff
from warrant.broker.publish import Outbox
from warrant.broker.transitions import (
    HARD_LIMIT_GRACE_S,
    reissue_command,
    stop_changes,
    stop_events,
)
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, OutcomeRow, Proposal, Reconciliation, Run
from warrant.ledger.repo import NewObservation, append_events, record_outcome, run_view, to_datetime
from warrant.ledger.repo import transition as cas
from warrant.runner.codes import ObservationKind, Phase, RunStatus, StopReason
from warrant.runner.planning import Stop
from warrant.runner.retry import backoff_delay
from warrant.runner.settings import WarrantSettings
from warrant.tools.contract import SideEffect, ToolContext

__all__ = ["SWEEP_LOCK", "SweepReport", "sweep"]

log = logging.getLogger("warrant.reconciler")

#: pg advisory lock key of the sweep ("WRRC").
SWEEP_LOCK = 0x5752_5243


@dataclass
class SweepReport:
    locked: bool = True
    stale: int = 0
    applied: int = 0
    retried: int = 0
    not_applied: int = 0
    still_unknown: int = 0
    handed_off: int = 0
    republished: int = 0
    expired: int = 0
    duration_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sweep(ctx: StageContext, settings: WarrantSettings | None = None) -> SweepReport:
    settings = settings or WarrantSettings()
    t0 = time.perf_counter()
    report = SweepReport()
    with ctx.engine.connect() as lock_conn:
        got = lock_conn.execute(select(func.pg_try_advisory_lock(SWEEP_LOCK))).scalar()
        lock_conn.commit()
        if not got:
            return SweepReport(locked=False)
        try:
            _stale_commands(ctx, settings, report)
            _unknown_effects(ctx, settings, report)
            _stalled_runs(ctx, settings, report)
            _expired_confirmations(ctx, settings, report)
        finally:
            lock_conn.execute(select(func.pg_advisory_unlock(SWEEP_LOCK)))
            lock_conn.commit()
    report.duration_ms = round((time.perf_counter() - t0) * 1000, 2)
    return report


# --- 1. stale commands -----------------------------------------------------------------------


def _stale_commands(ctx: StageContext, settings: WarrantSettings, report: SweepReport) -> None:
    margin = settings.lease_margin_s
    with session_scope(ctx.engine) as s:
        ids = s.scalars(
            select(Command.id)
            .join(Run, Run.id == Command.run_id)
            .where(
                # a literal, not a parameter: a generic plan can then use the partial index
                Command.status == literal_column("'started'"),
                Command.started_at
                + func.make_interval(
                    0, 0, 0, 0, 0, 0, Command.timeout_s + margin + HARD_LIMIT_GRACE_S
                )
                < func.now(),
                Run.status.in_([RunStatus.RUNNING.value, RunStatus.CANCELLING.value]),
            )
            .limit(settings.sweep_batch)
        ).all()
    for command_id in ids:
        outbox = Outbox()
        with session_scope(ctx.engine) as s:
            cmd = s.get(Command, command_id, with_for_update=True)
            if cmd is None or cmd.status != "started":
                continue
            run = s.get(Run, cmd.run_id, with_for_update=True)
            assert run is not None
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
            cmd.status, cmd.finished_at = "completed", func.now()
            events: list[tuple[str, dict[str, Any]]] = [
                ("command.lease_expired", {"tool": cmd.tool, "attempt": cmd.attempts})
            ]
            if read:
                # A lost read changed nothing: the planner sees the failure and goes on.
                if run.status == RunStatus.RUNNING:
                    v = cas(
                        s,
                        run.id,
                        run.version,
                        changes={"phase": Phase.PLANNING.value, "active_command_id": None},
                        events=events,
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
                    _finish_cancel(s, run, effect="none", events=events, step=cmd.step)
            else:
                events.append(
                    (
                        "effect.reconciliation_required",
                        {
                            "tool": cmd.tool,
                            "trigger": "lease-expired",
                            "recovery": "query" if tool and tool.reconcile else "human",
                        },
                    )
                )
                changes: dict[str, Any] = {"phase": Phase.IDLE.value}
                if run.status == RunStatus.RUNNING:
                    changes.update(
                        status=RunStatus.RECONCILING.value,
                        stop_reason=StopReason.UNKNOWN_EFFECT.value,
                    )
                cas(
                    s,
                    run.id,
                    run.version,
                    changes=changes,
                    events=events,
                    step=cmd.step,
                    proposal_id=cmd.proposal_id,
                )
            report.stale += 1
        outbox.flush()


# --- 2. unknown effects ----------------------------------------------------------------------


def _unknown_effects(ctx: StageContext, settings: WarrantSettings, report: SweepReport) -> None:
    with session_scope(ctx.engine) as s:
        rows = (
            s.execute(
                select(OutcomeRow.id)
                .join(
                    Run,
                    and_(
                        Run.id == OutcomeRow.run_id, Run.active_command_id == OutcomeRow.command_id
                    ),
                )
                .where(
                    Run.status.in_([RunStatus.RECONCILING.value, RunStatus.CANCELLING.value]),
                    OutcomeRow.status == "unknown",
                    OutcomeRow.resolved_status.is_(None),
                    (OutcomeRow.next_reconcile_at.is_(None))
                    | (OutcomeRow.next_reconcile_at <= func.now()),
                )
                .limit(settings.sweep_batch)
            )
            .scalars()
            .all()
        )
    for outcome_id in rows:
        try:
            _reconcile_one(ctx, settings, report, outcome_id)
        except Exception:
            log.exception("reconciling outcome %s failed; will retry next sweep", outcome_id)


def _reconcile_one(
    ctx: StageContext, settings: WarrantSettings, report: SweepReport, outcome_id: int
) -> None:
    with session_scope(ctx.engine) as s:
        outcome = s.get(OutcomeRow, outcome_id)
        if outcome is None or outcome.resolved_status is not None:
            return
        cmd = s.get(Command, outcome.command_id)
        run = s.get(Run, outcome.run_id)
        assert cmd is not None and run is not None
        tool = ctx.registry.get(cmd.tool, cmd.tool_version)
        token, subject, deadline = cmd.idempotency_token, run.subject, run.deadline_at
    found = None
    error = None
    if tool is not None and tool.reconcile is not None:
        context = ToolContext(
            run_id=run.id,
            command_id=cmd.id,
            subject=subject,
            idempotency_token=token,
            attempt=cmd.attempts,
            deadline_at=deadline.timestamp(),
            deps=ctx.deps_for(tool),
        )
        try:
            found = tool.reconcile(token, context)
        except Exception as exc:  # the status query itself failed: still unknown
            error = type(exc).__name__
    outbox = Outbox()
    with session_scope(ctx.engine) as s:
        outcome = s.get(OutcomeRow, outcome_id, with_for_update=True)
        run = s.get(Run, outcome.run_id, with_for_update=True) if outcome else None
        if (
            outcome is None
            or run is None
            or outcome.resolved_status is not None
            or run.active_command_id != outcome.command_id
        ):
            return
        cmd = s.get(Command, outcome.command_id, with_for_update=True)
        assert cmd is not None
        attempt = outcome.reconcile_attempts + 1
        result = (
            "unsupported"
            if tool is None or tool.reconcile is None
            else (
                "error"
                if error
                else "unknown"
                if found is None or found.applied is None
                else "applied"
                if found.applied
                else "not_applied"
            )
        )
        s.add(
            Reconciliation(
                run_id=run.id,
                command_id=cmd.id,
                attempt=attempt,
                result=result,
                detail={"error": error} if error else None,
            )
        )
        if result == "not_applied" and _attempt_may_run(s, cmd, outcome):
            # "Not applied" is only true once no attempt can still be applying it.
            assert cmd.started_at is not None
            outcome.next_reconcile_at = cmd.started_at + timedelta(
                seconds=cmd.timeout_s + HARD_LIMIT_GRACE_S
            )
            append_events(
                s,
                run.id,
                [("effect.reconcile_deferred", {"tool": cmd.tool, "reason": "attempt-may-run"})],
                step=cmd.step,
                proposal_id=cmd.proposal_id,
            )
            report.still_unknown += 1
            return
        outcome.reconcile_attempts = attempt
        event = ("effect.reconciled", {"tool": cmd.tool, "result": result, "attempt": attempt})
        cancelling = run.status == RunStatus.CANCELLING
        if result == "applied":
            outcome.resolved_status, outcome.resolved_at = "applied", func.now()
            cmd.status = "completed"
            observation = NewObservation(
                f"tool-{cmd.step}",
                ObservationKind.TOOL_RESULT,
                tool.output_source.value if tool else "trusted-tool",
                {
                    "tool": cmd.tool,
                    "status": "succeeded",
                    "output": (found.output if found else None) or {},
                    "reconciled": True,
                },
            )
            if cancelling:
                _finish_cancel(
                    s, run, effect="applied", events=[event], step=cmd.step, observation=observation
                )
            else:
                v = cas(
                    s,
                    run.id,
                    run.version,
                    changes={
                        "status": RunStatus.RUNNING.value,
                        "phase": Phase.PLANNING.value,
                        "stop_reason": None,
                        "active_command_id": None,
                    },
                    events=[
                        event,
                        ("state.transitioned", {"from": run.status, "to": RunStatus.RUNNING.value}),
                    ],
                    step=cmd.step,
                    proposal_id=cmd.proposal_id,
                    observation=observation,
                )
                rid = run.id
                outbox.add(lambda: ctx.publisher.planner(rid, v))
            report.applied += 1
        elif result == "not_applied":
            outcome.resolved_status, outcome.resolved_at = "not_applied", func.now()
            view = run_view(run)
            now = ctx.clock()
            assert tool is not None
            timeout = min(tool.timeout_s, view.deadline_at - now)
            if cancelling:
                cmd.status = "completed"
                _finish_cancel(s, run, effect="none", events=[event], step=cmd.step)
                report.not_applied += 1
            elif view.tool_calls < view.budgets.max_tool_calls and timeout > 0.5:
                # Known not applied: retry with the *same* command and idempotency token.
                reissue_command(
                    ctx,
                    s,
                    run,
                    cmd,
                    delay_s=0.0,
                    timeout_s=timeout,
                    changes={
                        "status": RunStatus.RUNNING.value,
                        "phase": Phase.TOOL.value,
                        "stop_reason": None,
                    },
                    events=[
                        event,
                        (
                            "tool.retry.scheduled",
                            {
                                "attempt": cmd.attempts + 1,
                                "delay_s": 0,
                                "code": outcome.code,
                                "after": "reconciliation",
                            },
                        ),
                        ("state.transitioned", {"from": run.status, "to": RunStatus.RUNNING.value}),
                    ],
                    outbox=outbox,
                )
                report.retried += 1
            else:
                cmd.status = "completed"
                stop = Stop(
                    RunStatus.FAILED,
                    StopReason.TOOL_FAILED,
                    {"tool": cmd.tool, "code": "NOT_APPLIED_NO_BUDGET"},
                )
                cas(
                    s,
                    run.id,
                    run.version,
                    changes=stop_changes(stop),
                    events=[event, *stop_events(view, stop, step=cmd.step)],
                    step=cmd.step,
                )
                report.not_applied += 1
        elif result == "unsupported" or attempt >= settings.max_reconcile_attempts:
            outcome.resolved_status, outcome.resolved_at = "handoff", func.now()
            s.flush()
            enter_handoff(
                s,
                run,
                reason=StopReason.UNKNOWN_EFFECT.value,
                registry=ctx.registry,
                events=[event],
            )
            report.handed_off += 1
        else:
            delay = backoff_delay(attempt, base_s=2.0, cap_s=300.0)
            outcome.next_reconcile_at = to_datetime(ctx.clock() + max(0.5, delay))
            append_events(s, run.id, [event], step=cmd.step, proposal_id=cmd.proposal_id)
            report.still_unknown += 1
    outbox.flush()


#: Unknown outcomes recorded by someone other than the attempt itself (the attempt may not
#: have noticed that it was declared lost).
_RECORDED_FOR_THE_ATTEMPT = frozenset({"WORKER_LOST_DURING_EXECUTION", "COMMAND_LEASE_EXPIRED"})


def _attempt_may_run(s: Any, cmd: Command, outcome: OutcomeRow) -> bool:
    """Could the attempt behind ``outcome`` still be running (its hard time limit, by the
    database's clock, not yet passed)?"""
    if outcome.code not in _RECORDED_FOR_THE_ATTEMPT or cmd.started_at is None:
        return False
    if cmd.attempts != outcome.attempt:
        return False
    hard_limit = cmd.started_at + timedelta(seconds=cmd.timeout_s + HARD_LIMIT_GRACE_S)
    return bool(s.scalar(select(func.now() < hard_limit)))


def _finish_cancel(
    s: Any,
    run: Run,
    *,
    effect: str,
    events: list[tuple[str, dict[str, Any]]],
    step: int,
    observation: NewObservation | None = None,
) -> None:
    stop = Stop(RunStatus.CANCELLED, StopReason.CANCELLED, {"effect": effect})
    cas(
        s,
        run.id,
        run.version,
        changes=stop_changes(stop),
        events=[*events, *stop_events(run_view(run), stop, step=step)],
        step=step,
        observation=observation,
    )


# --- 3. stalled runs -------------------------------------------------------------------------


def _stalled_runs(ctx: StageContext, settings: WarrantSettings, report: SweepReport) -> None:
    cutoff = func.now() - timedelta(seconds=settings.stall_after_s)
    with session_scope(ctx.engine) as s:
        ids = s.scalars(
            select(Run.id)
            .where(Run.status == RunStatus.RUNNING.value, Run.updated_at < cutoff)
            .order_by(Run.updated_at)
            .limit(settings.sweep_batch)
        ).all()
    for run_id in ids:
        outbox = Outbox()
        with session_scope(ctx.engine) as s:
            run = s.get(Run, run_id, with_for_update=True)
            if run is None or run.status != RunStatus.RUNNING:
                continue
            version, phase = run.version, run.phase
            if phase == Phase.PLANNING:
                outbox.add(partial(ctx.publisher.planner, run_id, version))
            elif phase == Phase.POLICY:
                outbox.add(partial(ctx.publisher.policy, run_id, version))
            elif phase == Phase.TOOL and run.active_command_id:
                cmd = s.get(Command, run.active_command_id)
                due = (
                    cmd is not None
                    and cmd.status == "issued"
                    and cmd.deadline_at.timestamp() + settings.lease_margin_s < ctx.clock()
                )
                if not due or cmd is None:
                    continue
                outbox.add(
                    partial(
                        ctx.publisher.tool,
                        run_id=run_id,
                        version=version,
                        command_id=cmd.id,
                        tool=cmd.tool,
                        soft_time_limit=cmd.timeout_s,
                        time_limit=cmd.timeout_s + HARD_LIMIT_GRACE_S,
                    )
                )
            else:
                continue
            s.execute(update(Run).where(Run.id == run_id).values(updated_at=func.now()))
            append_events(
                s,
                run_id,
                [("run.republished", {"phase": phase, "version": version})],
                step=run.step,
            )
            report.republished += 1
        outbox.flush()


# --- 4. expired confirmations ----------------------------------------------------------------


def _expired_confirmations(
    ctx: StageContext, settings: WarrantSettings, report: SweepReport
) -> None:
    now = ctx.clock()
    with session_scope(ctx.engine) as s:
        rows = s.execute(
            select(Run.id, Proposal.confirmation_request, Run.deadline_at)
            .join(Proposal, Proposal.id == Run.pending_proposal_id)
            .where(Run.status == RunStatus.WAITING_CONFIRMATION.value)
            .order_by(Run.updated_at)
            .limit(settings.sweep_batch * 10)
        ).all()
    due = [
        (rid, req, dl)
        for rid, req, dl in rows
        if dl.timestamp() <= now or float((req or {}).get("expires_at", 0)) <= now
    ]
    for run_id, _request, deadline in due[: settings.sweep_batch]:
        with session_scope(ctx.engine) as s:
            run = s.get(Run, run_id, with_for_update=True)
            if run is None or run.status != RunStatus.WAITING_CONFIRMATION:
                continue
            reason = (
                StopReason.DEADLINE_REACHED
                if deadline.timestamp() <= now
                else StopReason.CONFIRMATION_EXPIRED
            )
            stop = Stop(RunStatus.CANCELLED, reason, {"effect": "none"})
            cas(
                s,
                run.id,
                run.version,
                changes=stop_changes(stop),
                events=[
                    ("confirmation.expired", {"reason": reason.value}),
                    *stop_events(run_view(run), stop, step=run.step),
                ],
                step=run.step,
            )
            report.expired += 1
