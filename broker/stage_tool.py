"""Tool stage: execute one command at most once per logical action, record a typed outcome.

Lifecycle in the ledger: ``issued -> started -> completed``. A redelivery that finds an
outcome only re-emits the continuation; one that finds ``started`` without an outcome
re-invokes only tools that are safe to re-invoke with the same idempotency token.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError
from sqlalchemy import func

from broker.context import StageContext
from broker.publish import Outbox
from broker.transitions import stop_changes, stop_events
from ledger.db import session_scope
from ledger.models import Command, Run
from ledger.repo import (
    NewObservation,
    StaleVersion,
    append_events,
    command_for_update,
    record_outcome,
    run_view,
    transition,
)
from runner.canonical import sha256_hex
from runner.codes import ObservationKind, Outcome, Phase, RunStatus, StopReason
from runner.errors import ToolFailed, ToolRejected, ToolUnknown
from runner.planning import Stop
from tools.contract import SideEffect, Tool, ToolContext

__all__ = ["tool_execute"]

log = logging.getLogger("warrant.tool")


@dataclass
class _Result:
    status: Outcome
    code: str | None = None
    message: str | None = None
    retryable: bool = False
    output: dict[str, Any] | None = None
    stop: StopReason | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def tool_execute(ctx: StageContext, run_id: str, version: int, command_id: str) -> str:
    outbox = Outbox()
    tool: Tool[Any, Any] | None = None
    with session_scope(ctx.engine) as s:
        cmd = command_for_update(s, command_id)
        run = s.get(Run, run_id)
        if cmd is None or run is None:
            return "ignored"
        if cmd.status == "completed":
            if run.status == RunStatus.RUNNING and run.phase == Phase.PLANNING:
                v = run.version
                outbox.add(lambda: ctx.publisher.planner(run_id, v))
            result = "duplicate"
        elif run.status != RunStatus.RUNNING or run.version != version:
            cmd.status = "discarded"
            result = "discarded"
        else:
            result = ""
            tool = ctx.registry.get(cmd.tool, cmd.tool_version)
            assert tool is not None, "the gate only issues commands for registered tools"
            if cmd.status == "started" and not tool.side_effect.safe_to_reinvoke:
                result = "unknown"
            else:
                cmd.status, cmd.attempts, cmd.started_at = "started", cmd.attempts + 1, func.now()
                append_events(
                    s,
                    run_id,
                    [
                        (
                            "tool.started",
                            {
                                "tool": cmd.tool,
                                "version": cmd.tool_version,
                                "attempt": cmd.attempts,
                                "timeout_s": round(cmd.timeout_s, 3),
                                "idempotency_key_hash": sha256_hex(cmd.idempotency_token)[:16],
                            },
                        )
                    ],
                    step=cmd.step,
                    proposal_id=cmd.proposal_id,
                )
            snapshot = _Snapshot(cmd, run)
    if result and result != "unknown":
        outbox.flush()
        return result
    assert tool is not None
    if result == "unknown":
        outcome = _Result(
            Outcome.UNKNOWN,
            "WORKER_LOST_DURING_EXECUTION",
            "a previous delivery started this command and did not finish",
            stop=StopReason.UNKNOWN_EFFECT,
        )
    else:
        outcome = _run_tool(ctx, tool, snapshot)
    return _record(ctx, snapshot, tool, outcome, version)


@dataclass(frozen=True)
class _Snapshot:
    command_id: str
    run_id: str
    step: int
    proposal_id: str
    arguments: dict[str, Any]
    token: str
    attempt: int
    deadline_at: float
    subject: str

    def __init__(self, cmd: Command, run: Run) -> None:
        object.__setattr__(self, "command_id", cmd.id)
        object.__setattr__(self, "run_id", run.id)
        object.__setattr__(self, "step", cmd.step)
        object.__setattr__(self, "proposal_id", cmd.proposal_id)
        object.__setattr__(self, "arguments", dict(cmd.arguments))
        object.__setattr__(self, "token", cmd.idempotency_token)
        object.__setattr__(self, "attempt", cmd.attempts)
        object.__setattr__(self, "deadline_at", cmd.deadline_at.timestamp())
        object.__setattr__(self, "subject", run.subject)


def _run_tool(ctx: StageContext, tool: Tool[Any, Any], snap: _Snapshot) -> _Result:
    context = ToolContext(
        run_id=snap.run_id,
        command_id=snap.command_id,
        subject=snap.subject,
        idempotency_token=snap.token,
        attempt=snap.attempt,
        deadline_at=snap.deadline_at,
        deps=ctx.tool_deps,
    )
    write = tool.side_effect is not SideEffect.READ
    try:
        args = tool.input_model.model_validate(snap.arguments)
        out = tool.execute(args, context)
    except ToolRejected as exc:
        return _Result(Outcome.REJECTED, exc.code, str(exc))
    except ToolFailed as exc:
        return _Result(
            Outcome.FAILED,
            exc.code,
            str(exc),
            retryable=exc.retryable,
            stop=None if exc.retryable else StopReason.TOOL_FAILED,
        )
    except (ToolUnknown, SoftTimeLimitExceeded) as exc:
        code = exc.code if isinstance(exc, ToolUnknown) else "TOOL_TIMEOUT"
        if write:
            return _Result(Outcome.UNKNOWN, code, str(exc) or code, stop=StopReason.UNKNOWN_EFFECT)
        return _Result(Outcome.FAILED, code, str(exc) or code, stop=StopReason.TOOL_FAILED)
    except Exception as exc:  # an unclassified exception is an internal error: stop, no retry
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
    return result


def _record(
    ctx: StageContext, snap: _Snapshot, tool: Tool[Any, Any], res: _Result, version: int
) -> str:
    outbox = Outbox()
    duration_ms = None
    with session_scope(ctx.engine) as s:
        cmd = command_for_update(s, snap.command_id)
        assert cmd is not None
        if cmd.started_at is not None:
            duration_ms = round((time.time() - cmd.started_at.timestamp()) * 1000, 1)
        fresh = record_outcome(
            s,
            command_id=snap.command_id,
            run_id=snap.run_id,
            status=res.status.value,
            code=res.code,
            retryable=res.retryable,
            message=res.message,
            output=res.output,
            attempt=snap.attempt,
            duration_ms=duration_ms,
        )
        run = s.get(Run, snap.run_id)
        assert run is not None
        if not fresh:
            if run.status == RunStatus.RUNNING and run.phase == Phase.PLANNING:
                v = run.version
                outbox.add(lambda: ctx.publisher.planner(snap.run_id, v))
        else:
            cmd.status, cmd.finished_at = "completed", func.now()
            view = run_view(run)
            events = [
                (
                    "tool.completed",
                    {
                        "tool": tool.name,
                        "status": res.status.value,
                        "code": res.code,
                        "duration_ms": duration_ms,
                    },
                ),
                *res.events,
            ]
            observation = None
            if res.status is not Outcome.UNKNOWN:
                content: dict[str, Any] = {"tool": tool.name, "status": res.status.value}
                if res.output is not None:
                    content["output"] = res.output
                if res.code:
                    content["code"] = res.code
                observation = NewObservation(
                    f"tool-{snap.step}",
                    ObservationKind.TOOL_RESULT,
                    tool.output_source.value,
                    content,
                )
            if res.stop is not None:
                status = RunStatus.FAILED
                stop = Stop(status, res.stop, {"tool": tool.name, "code": res.code})
                changes = stop_changes(stop)
                events += stop_events(view, stop, step=snap.step)
            else:
                changes = {"phase": Phase.PLANNING.value, "active_command_id": None}
            try:
                with s.begin_nested():
                    new_version = transition(
                        s,
                        snap.run_id,
                        version,
                        changes=changes,
                        events=events,
                        step=snap.step,
                        proposal_id=snap.proposal_id,
                        observation=observation,
                    )
                if res.stop is None:
                    outbox.add(lambda: ctx.publisher.planner(snap.run_id, new_version))
            except StaleVersion:
                log.warning("run %s moved on while its tool ran; outcome kept", snap.run_id)
    outbox.flush()
    return res.status.value
