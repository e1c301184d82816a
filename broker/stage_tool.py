"""Tool stage: execute one command at most once per logical action, record a typed outcome.

Lifecycle in the ledger: ``issued -> started -> completed`` (or ``discarded``). The common
case is two statements: the claim (load and start) and the record. A redelivery
that finds an outcome only re-emits the continuation; one that finds ``started`` without an
outcome re-invokes only tools that are safe to re-invoke with the same idempotency token and
records ``unknown`` for the others (the reconciler resolves it).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
import sqlalchemy.exc
import tenacity
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError
from sqlalchemy import func

from warrant.broker import interrupts, telemetry
from warrant.broker.context import StageContext
from warrant.broker.faults import crash_point
from warrant.broker.late import late_outcome, record_late
from warrant.broker.lease import holder_lost, holder_of, lease_end
from warrant.broker.publish import Outbox
from warrant.broker.transitions import reissue_command, stop_changes, stop_events
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, Run
from warrant.ledger.repo import (
    NewObservation,
    StaleVersion,
    append_events,
    command_for_update,
    record_outcome,
    run_view,
    to_datetime,
    transition,
)
from warrant.ledger.steps import (
    autocommit,
    claim_command,
    complete_command,
    discard_command,
    insert_outcome,
    load_tool,
    start_command,
)
from warrant.runner.canonical import sha256_hex
from warrant.runner.codes import ObservationKind, Outcome, Phase, RunStatus, StopReason
from warrant.runner.errors import ToolFailed, ToolRejected, ToolUnknown
from warrant.runner.planning import Stop
from warrant.runner.retry import decide_retry
from warrant.runner.state import RunView
from warrant.tools.contract import SideEffect, Tool, ToolContext

__all__ = ["DATABASE_ERRORS", "tool_execute"]

log = logging.getLogger("warrant.tool")
_CANCEL_CHECK_EVERY_S = 0.2
CANCELLED_STATUSES = (RunStatus.CANCELLING.value, RunStatus.CANCELLED.value)
#: How long an attempt keeps trying to record its outcome while the ledger is unreachable.
RECORD_PATIENCE_S = 120.0
LEDGER_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)
#: A lost or refused database connection inside a tool call (its own or a store's it uses).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


@dataclass
class _Result:
    status: Outcome
    code: str | None = None
    message: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    output: dict[str, Any] | None = None
    stop: StopReason | None = None
    trigger: str | None = None
    """For ``unknown``: what made the effect uncertain (adapter, timeout, cancellation)."""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class _Snapshot:
    command_id: str
    run_id: str
    version: int
    step: int
    proposal_id: str
    arguments: dict[str, Any]
    token: str
    attempt: int
    deadline_at: float
    timeout_s: float
    subject: str
    confirmation_id: str | None
    started_at: float
    view: RunView


def _snapshot(row: Any, *, attempt: int, version: int) -> _Snapshot:
    return _Snapshot(
        command_id=row.cmd_id,
        run_id=row.id,
        version=version,
        step=row.cmd_step,
        proposal_id=row.cmd_proposal_id,
        arguments=dict(row.cmd_arguments),
        token=row.cmd_token,
        attempt=attempt,
        deadline_at=row.cmd_deadline_at.timestamp(),
        timeout_s=row.cmd_timeout_s,
        subject=row.subject,
        confirmation_id=row.cmd_confirmation_id,
        started_at=time.time(),
        view=run_view(row),
    )


def tool_execute(
    ctx: StageContext,
    run_id: str,
    version: int,
    command_id: str,
    *,
    worker: str | None = None,
    tool: str | None = None,
) -> str:
    """Claim the command, run the tool, record the outcome: two statements in the common case.

    A tool with an effect (any side effect but ``read``) gets ``started`` committed before it
    runs: a delivery that finds it started and unfinished re-invokes it with the same token
    only if that is safe, and records ``unknown`` otherwise; the reconciler finds it by its
    lease. A read has no effect to protect: its start does not wait for the WAL flush (a lost
    start simply runs the read again). ``tool`` is the message's tool name; without it (or
    if it is not the command's) the command takes the general path, with a durable start."""
    if tool is None:
        return _general_path(ctx, run_id, version, command_id, worker=worker)
    # A read's start is only informational (re-running it is harmless): its commit does not
    # wait for the WAL flush. Any other start is the durable intent before the effect. The
    # claim matches the command's own tool, so a message naming another tool cannot relax it.
    versions = ctx.registry.by_name(tool)
    read = bool(versions) and all(t.side_effect is SideEffect.READ for t in versions)
    with autocommit(ctx.engine, relaxed=read) as conn:
        row = claim_command(
            conn,
            run_id=run_id,
            version=version,
            command_id=command_id,
            tool=tool,
            versions=[t.version for t in versions],
            worker=worker,
        )
    if row is not None:
        found = ctx.registry.get(row.cmd_tool, row.cmd_tool_version)
        assert found is not None, "the claim only starts versions this worker has"
        # The record compares-and-sets at the version the claim checked, not at the returned
        # row's (newer if a cancel committed meanwhile: then the locked path sorts it out).
        return _execute(ctx, found, _snapshot(row, attempt=row.cmd_attempts, version=version))
    return _general_path(ctx, run_id, version, command_id, worker=worker)


def _general_path(
    ctx: StageContext, run_id: str, version: int, command_id: str, *, worker: str | None
) -> str:
    """The claim did not apply: a duplicate or late delivery, a stopped run, a started
    command whose tool may (or may not) be re-invoked, or a message that does not name the
    command's tool."""
    with autocommit(ctx.engine) as conn:
        row = load_tool(conn, run_id, command_id)
    if row is None:
        return "ignored"
    if row.cmd_status == "completed":
        if row.status == RunStatus.RUNNING and row.phase == Phase.PLANNING:
            ctx.publisher.planner(run_id, row.version)
        return "duplicate"
    if row.cmd_status == "discarded":
        return "discarded"
    if row.status != RunStatus.RUNNING or row.version != version:
        if row.status != RunStatus.RUNNING and row.cmd_status == "issued":
            with autocommit(ctx.engine) as conn:
                discard_command(conn, command_id)
            return "discarded"
        return "ignored"
    tool = ctx.registry.get(row.cmd_tool, row.cmd_tool_version)
    assert tool is not None, "the gate only issues commands for registered tools"
    started = row.cmd_status == "started"
    if started and not _attempt_lost(ctx, row, worker):
        return _in_flight(ctx, row)
    with autocommit(ctx.engine) as conn:
        attempt = start_command(
            conn,
            run_id=run_id,
            version=version,
            command_id=command_id,
            worker=worker,
            reinvoke=tool.side_effect.safe_to_reinvoke,
            seen_attempt=row.cmd_attempts,
            key_hash=sha256_hex(row.cmd_token)[:16],
        )
    if attempt is None:
        if not started or tool.side_effect.safe_to_reinvoke:
            return "ignored"
        lost = _Result(
            Outcome.UNKNOWN,
            "WORKER_LOST_DURING_EXECUTION",
            "an earlier delivery started this command and its process is gone",
            stop=StopReason.UNKNOWN_EFFECT,
            trigger="worker-lost",
        )
        return _record(ctx, _snapshot(row, attempt=row.cmd_attempts, version=version), tool, lost)
    return _execute(ctx, tool, _snapshot(row, attempt=attempt, version=version))


def _attempt_lost(ctx: StageContext, row: Any, worker: str | None) -> bool:
    """May a delivery that finds the command ``started`` declare its attempt lost? Only when
    the attempt's lease has expired or its process is known gone (see ``broker.lease``)."""
    if row.cmd_started_at is None:
        return True
    end = lease_end(
        row.cmd_started_at.timestamp(), row.cmd_timeout_s, margin_s=ctx.settings.lease_margin_s
    )
    if ctx.clock() >= end:
        return True
    this = holder_of(worker)
    return holder_lost(holder_of(row.cmd_worker), this_node=this.node if this else None)


def _in_flight(ctx: StageContext, row: Any) -> str:
    """Another attempt of this command is running: leave it alone (this delivery is dropped;
    a lost attempt is found by its lease, by the reconciler's stale sweep)."""
    with session_scope(ctx.engine) as s:
        append_events(
            s,
            row.id,
            [
                (
                    "tool.delivery.in_flight",
                    {"tool": row.cmd_tool, "attempt": row.cmd_attempts, "holder": row.cmd_worker},
                )
            ],
            step=row.cmd_step,
            proposal_id=row.cmd_proposal_id,
        )
    return "in_flight"


def _execute(ctx: StageContext, tool: Tool[Any, Any], snapshot: _Snapshot) -> str:
    with telemetry.span(
        "tool.execute",
        run_id=snapshot.run_id,
        proposal_id=snapshot.proposal_id,
        tool=tool.name,
        attempt=snapshot.attempt,
    ) as sp:
        outcome = _run_tool(ctx, tool, snapshot)
        if sp is not None:
            sp.set_attribute("warrant.outcome", outcome.status.value)
            if outcome.code:
                sp.set_attribute("warrant.code", outcome.code)
    # The outcome is known only to this process: a lost ledger connection must not lose it.
    for attempt in tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(LEDGER_ERRORS),
        wait=tenacity.wait_exponential(multiplier=0.2, max=5),
        stop=tenacity.stop_after_delay(RECORD_PATIENCE_S),
        before_sleep=lambda state: log.warning(
            "recording the outcome of command %s failed (%s); retrying",
            snapshot.command_id,
            state.outcome.exception() if state.outcome else None,
        ),
        reraise=True,
    ):
        with attempt:
            if not (outcome.status is Outcome.FAILED and outcome.retryable):
                done = _record_fast(ctx, snapshot, tool, outcome)
                if done is not None:
                    return done
            return _record(ctx, snapshot, tool, outcome)
    raise AssertionError("unreachable: tenacity re-raises")


def _cancel_flag(ctx: StageContext, run_id: str) -> Any:
    """A cancellation check backed by the ledger (throttled), for tools to poll."""
    last = {"at": 0.0, "value": False}

    def is_cancelled(*, fresh: bool = False) -> bool:
        now = time.monotonic()
        stale = now - float(last["at"]) >= _CANCEL_CHECK_EVERY_S
        if not last["value"] and (fresh or stale):
            last["at"] = now
            last["value"] = ctx.tool_deps.run_status(run_id) in CANCELLED_STATUSES
        return bool(last["value"])

    return is_cancelled


def _run_tool(ctx: StageContext, tool: Tool[Any, Any], snap: _Snapshot) -> _Result:
    is_cancelled = _cancel_flag(ctx, snap.run_id)
    context = ToolContext(
        run_id=snap.run_id,
        command_id=snap.command_id,
        subject=snap.subject,
        idempotency_token=snap.token,
        attempt=snap.attempt,
        deadline_at=snap.deadline_at,
        deps=ctx.deps_for(tool),
        is_cancelled=is_cancelled,
        confirmation_id=snap.confirmation_id,
    )
    write = tool.side_effect is not SideEffect.READ
    try:
        args = tool.parse_input(snap.arguments)
        with interrupts.interruptible():  # a cancel's SIGUSR1 lands only here
            out = tool.execute(args, context)
    except ToolRejected as exc:
        return _Result(Outcome.REJECTED, exc.code, str(exc), output=exc.details)
    except ToolFailed as exc:
        return _Result(
            Outcome.FAILED,
            exc.code,
            str(exc),
            retryable=exc.retryable,
            retry_after_s=exc.retry_after_s,
            stop=None if exc.retryable else StopReason.TOOL_FAILED,
        )
    except (ToolUnknown, SoftTimeLimitExceeded) as exc:
        cancelled = ctx.tool_deps.run_status(snap.run_id) in CANCELLED_STATUSES
        if isinstance(exc, ToolUnknown):
            code, trigger = exc.code, "adapter"
        elif cancelled:
            code, trigger = "CANCELLED_DURING_EXECUTION", "cancellation"
        else:
            code, trigger = "TOOL_TIMEOUT", "timeout"
        if write:
            return _Result(
                Outcome.UNKNOWN,
                code,
                str(exc) or code,
                stop=StopReason.UNKNOWN_EFFECT,
                trigger=trigger,
            )
        deadline_bound = snap.timeout_s < tool.timeout_s - 1e-6
        stop = (
            StopReason.DEADLINE_REACHED
            if trigger == "timeout" and deadline_bound
            else StopReason.TOOL_FAILED
        )
        return _Result(Outcome.FAILED, code, str(exc) or code, stop=stop)
    except DATABASE_ERRORS as exc:  # the ledger or a tool's database went away: transient
        if write:
            return _Result(
                Outcome.UNKNOWN,
                "DATABASE_UNAVAILABLE",
                f"a database connection failed during the call ({type(exc).__name__})",
                stop=StopReason.UNKNOWN_EFFECT,
                trigger="database",
            )
        return _Result(
            Outcome.FAILED,
            "DATABASE_UNAVAILABLE",
            f"a database connection failed during the read ({type(exc).__name__})",
            retryable=True,
        )
    except Exception as exc:  # unclassified: an internal error; stop, never retry blindly
        log.exception("tool %s raised an unclassified exception", tool.name)
        return _Result(
            Outcome.FAILED,
            "TOOL_INTERNAL_ERROR",
            type(exc).__name__,
            stop=StopReason.TOOL_INTERNAL_ERROR,
        )
    try:
        validated = tool.output_model.model_validate(out.model_dump(mode="json"))
    except (ValidationError, AttributeError):
        return _Result(
            Outcome.FAILED,
            "TOOL_OUTPUT_INVALID",
            "output failed its schema",
            stop=StopReason.TOOL_INTERNAL_ERROR,
        )
    result = _Result(Outcome.SUCCEEDED, output=validated.model_dump(mode="json"))
    result.events.append(("tool.result.validated", {"tool": tool.name}))
    if tool.verify is not None:
        ok = bool(tool.verify(args, validated, context))
        result.events.append(("tool.postcondition.checked", {"tool": tool.name, "ok": ok}))
        if not ok:
            result.stop, result.code = (
                StopReason.TOOL_POSTCONDITION_FAILED,
                "TOOL_POSTCONDITION_FAILED",
            )
            result.events.append(
                (
                    "effect.compensation_required",
                    {
                        "tool": tool.name,
                        "side_effect": tool.side_effect.value,
                        "idempotency_key_hash": sha256_hex(snap.token)[:16],
                    },
                )
            )
    return result


def _attempt_event(
    tool: Tool[Any, Any], res: _Result, attempt: int, duration_ms: float | None
) -> tuple[str, dict[str, Any]]:
    return (
        "tool.completed",
        {
            "tool": tool.name,
            "status": res.status.value,
            "code": res.code,
            "attempt": attempt,
            "duration_ms": duration_ms,
        },
    )


def _outcome_values(snap: _Snapshot, res: _Result, duration_ms: float | None) -> dict[str, Any]:
    return {
        "command_id": snap.command_id,
        "run_id": snap.run_id,
        "status": res.status.value,
        "code": res.code,
        "retryable": res.retryable,
        "message": res.message,
        "output": res.output,
        "attempt": snap.attempt,
        "duration_ms": duration_ms,
    }


def _record_fast(
    ctx: StageContext, snap: _Snapshot, tool: Tool[Any, Any], res: _Result
) -> str | None:
    """The common case in one statement: the run is where the message left it. None when the
    compare-and-set lost (a cancel, a duplicate delivery): :func:`_record` sorts that out."""
    duration_ms = round((time.time() - snap.started_at) * 1000, 1)
    attempt_event = _attempt_event(tool, res, snap.attempt, duration_ms)
    changes, events, observation, go_on = _conclusion(
        RunStatus.RUNNING, snap.view, tool, res, snap.step, attempt_event
    )
    command = {"status": "completed", "finished_at": to_datetime(time.time())}
    try:
        with autocommit(ctx.engine) as conn:
            version = transition(
                conn,
                snap.run_id,
                snap.version,
                changes=changes,
                events=events,
                step=snap.step,
                proposal_id=snap.proposal_id,
                observation=observation,
                guarded=[
                    complete_command(snap.command_id, command),
                    insert_outcome(_outcome_values(snap, res, duration_ms)),
                ],
                current_attempt=(snap.command_id, snap.attempt),
            )
    except StaleVersion:
        return None
    crash_point("tool:after_commit", snap.run_id)
    if go_on:
        ctx.publisher.planner(snap.run_id, version)
    return res.status.value


def _record(ctx: StageContext, snap: _Snapshot, tool: Tool[Any, Any], res: _Result) -> str:
    """The general case, under row locks: retries, cancellation, duplicates."""
    outbox = Outbox()
    with session_scope(ctx.engine) as s:
        cmd = command_for_update(s, snap.command_id)
        run = s.get(Run, snap.run_id, with_for_update=True)
        assert cmd is not None and run is not None
        if cmd.status != "started" or cmd.attempts != snap.attempt:
            # Not (or no longer) this attempt's command to conclude.
            return record_late(ctx, s, run, cmd, tool, late_outcome(res, snap.attempt), outbox)
        duration_ms = None
        if cmd.started_at is not None:
            duration_ms = round((time.time() - cmd.started_at.timestamp()) * 1000, 1)
        attempt_event = _attempt_event(tool, res, snap.attempt, duration_ms)
        if (
            res.status is Outcome.FAILED
            and res.retryable
            and run.status == RunStatus.RUNNING
            and _maybe_retry(ctx, s, run, cmd, tool, res, attempt_event, outbox)
        ):
            result = "retry_scheduled"
        else:
            result = _finish(ctx, s, run, cmd, tool, res, attempt_event, duration_ms, snap, outbox)
    crash_point("tool:after_commit", snap.run_id)
    outbox.flush()
    return result


def _maybe_retry(
    ctx: StageContext,
    s: Any,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    res: _Result,
    attempt_event: tuple[str, dict[str, Any]],
    outbox: Outbox,
) -> bool:
    view = run_view(run)
    now = ctx.clock()
    timeout = max(0.001, min(tool.timeout_s, view.deadline_at - now))
    decision = decide_retry(
        attempt=cmd.attempts,
        max_attempts=tool.max_attempts,
        tool_calls=view.tool_calls,
        max_tool_calls=view.budgets.max_tool_calls,
        now=now,
        deadline_at=view.deadline_at,
        attempt_timeout_s=timeout,
        base_s=tool.retry_base_s,
        cap_s=tool.retry_cap_s,
        retry_after_s=res.retry_after_s,
    )
    if not decision.retry:
        res.events.insert(
            0, ("tool.retry.refused", {"reason": decision.reason, "attempt": cmd.attempts})
        )
        return False
    attempt_timeout = max(0.001, min(tool.timeout_s, view.deadline_at - now - decision.delay_s))
    reissue_command(
        ctx,
        s,
        run,
        cmd,
        delay_s=decision.delay_s,
        timeout_s=attempt_timeout,
        changes={},
        events=[
            attempt_event,
            (
                "tool.retry.scheduled",
                {
                    "attempt": cmd.attempts + 1,
                    "delay_s": round(decision.delay_s, 3),
                    "code": res.code,
                    "retry_after": res.retry_after_s is not None,
                },
            ),
        ],
        outbox=outbox,
    )
    return True


def _finish(
    ctx: StageContext,
    s: Any,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    res: _Result,
    attempt_event: tuple[str, dict[str, Any]],
    duration_ms: float | None,
    snap: _Snapshot,
    outbox: Outbox,
) -> str:
    if not record_outcome(s, **_outcome_values(snap, res, duration_ms)):
        return "superseded"  # lost the race for this attempt's outcome: no transition follows
    cmd.status, cmd.finished_at = "completed", func.now()
    changes, events, observation, go_on = _conclusion(
        RunStatus(run.status), run_view(run), tool, res, cmd.step, attempt_event
    )
    new_version = transition(
        s,
        run.id,
        run.version,
        changes=changes,
        events=events,
        step=cmd.step,
        proposal_id=cmd.proposal_id,
        observation=observation,
    )
    if go_on:
        run_id = run.id
        outbox.add(lambda: ctx.publisher.planner(run_id, new_version))
    return res.status.value


def _conclusion(
    status: RunStatus,
    view: RunView,
    tool: Tool[Any, Any],
    res: _Result,
    step: int,
    attempt_event: tuple[str, dict[str, Any]],
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], NewObservation | None, bool]:
    """What an outcome does to a run at ``status``: its changes, events, observation, and
    whether the planner goes on."""
    events = [attempt_event, *res.events]
    observation = None
    if res.status is not Outcome.UNKNOWN:
        content: dict[str, Any] = {"tool": tool.name, "status": res.status.value}
        if res.output is not None:
            content["output"] = res.output
        if res.code:
            content["code"] = res.code
        observation = NewObservation(
            f"tool-{step}", ObservationKind.TOOL_RESULT, tool.output_source.value, content
        )
    if res.status is Outcome.UNKNOWN:
        events.append(
            (
                "effect.reconciliation_required",
                {
                    "tool": tool.name,
                    "trigger": res.trigger,
                    "recovery": "query" if tool.reconcile is not None else "human",
                },
            )
        )
    changes: dict[str, Any]
    if status is RunStatus.CANCELLING:
        if res.status is Outcome.UNKNOWN:
            # The effect is not known: the run stays cancelling until it is reconciled.
            changes = {"phase": Phase.IDLE.value}
        else:
            applied = res.status is Outcome.SUCCEEDED and tool.side_effect is not SideEffect.READ
            stop = Stop(
                RunStatus.CANCELLED,
                StopReason.CANCELLED,
                {"effect": "applied" if applied else "none", "tool": tool.name},
            )
            changes = stop_changes(stop)
            events += stop_events(view, stop, step=step)
    elif status is not RunStatus.RUNNING:
        changes = {}
    elif res.status is Outcome.UNKNOWN:
        changes = {
            "status": RunStatus.RECONCILING.value,
            "phase": Phase.IDLE.value,
            "stop_reason": StopReason.UNKNOWN_EFFECT.value,
            "stop_detail": {"tool": tool.name, "code": res.code},
        }
        events.append(
            ("state.transitioned", {"from": status.value, "to": RunStatus.RECONCILING.value})
        )
    elif res.stop is not None:
        stop = Stop(RunStatus.FAILED, res.stop, {"tool": tool.name, "code": res.code})
        changes = stop_changes(stop)
        events += stop_events(view, stop, step=step)
    else:
        changes = {"phase": Phase.PLANNING.value, "active_command_id": None}
    go_on = status is RunStatus.RUNNING and res.stop is None and res.status is not Outcome.UNKNOWN
    return changes, events, observation, go_on
