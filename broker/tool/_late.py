"""An attempt that finishes after its command moved on: what it found is still a fact.

An attempt concludes its command only while it is the command's current attempt
(``started`` at that attempt number). When it is not — the command was completed by someone
else, or re-issued — the attempt never transitions the run; but if it made (or may have
made) an effect, the ledger must not keep saying the effect did not happen. What it means is
:func:`warrant.runner.tool_stage.late_verdict`; this module loads its facts and writes it: a
trace (``tool.attempt.superseded``, ``effect.found_late``), the corrected outcome, and a
handoff for an effect the ledger did not know of (unless the run is back on this very command).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from warrant.broker.handoff_entry import enter_handoff
from warrant.ledger import rows
from warrant.ledger.models import Command, Reconciliation, Run
from warrant.ledger.repo import append_events, record_outcome
from warrant.ledger.row_updates import resolve_outcome
from warrant.runner.codes import Outcome, RunStatus, StopReason
from warrant.runner.tool_outcomes import ToolResult
from warrant.runner.tool_stage import late_verdict, planning
from warrant.tools._contract import Tool

__all__ = ["record_late"]


def record_late(
    ctx: Any,
    s: Session,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    late: ToolResult,
    attempt: int,
    outbox: Any,
) -> str:
    """Record what attempt ``attempt``, no longer current, found (``run`` and ``cmd`` locked)."""
    prior = rows.attempt_outcome(s, cmd.id, attempt)
    status = RunStatus(run.status)
    result, recorded = late_verdict(
        status=late.status,
        code=late.code,
        output=late.output,
        attempt=attempt,
        side_effect=tool.side_effect,
        prior=prior,
        outcomes=rows.command_outcomes(s, cmd.id),
        run_status=status,
        same_command=run.active_command_id == cmd.id,
    )
    if result == "duplicate":
        if planning(run):
            outbox.add(partial(ctx.publisher.planner, run.id, run.version))
        return result
    details = {
        "tool": cmd.tool,
        "attempt": attempt,
        "current_attempt": cmd.attempts,
        "command_status": cmd.status,
        "status": late.status.value,
        "code": late.code,
    }
    if result == "superseded":
        if recorded is not None:
            details |= {"effect": "already_recorded", "recorded_attempt": recorded}
        _trace(s, run, cmd, [("tool.attempt.superseded", details)])
        return result
    found = "applied" if late.status is Outcome.SUCCEEDED else "unknown"
    _correct(s, run, cmd, late, attempt, prior, found)
    events = [("effect.found_late", {**details, "effect": found})]
    if result == "late_recorded":
        _trace(s, run, cmd, events)
        return result
    s.flush()
    enter_handoff(
        s,
        run,
        reason=StopReason.UNKNOWN_EFFECT.value,
        registry=ctx.registry,
        events=events,
        late_effect=True,
    )
    return result


def _correct(
    s: Session, run: Run, cmd: Command, late: ToolResult, attempt: int, prior: Any, found: str
) -> None:
    """Record what the attempt found: its outcome if none was recorded, else a corrected
    verdict on the recorded one (with a reconciliation row saying it came late)."""
    if prior is None:
        record_outcome(
            s,
            command_id=cmd.id,
            run_id=run.id,
            status=late.status.value,
            code=late.code or "LATE_ATTEMPT",
            retryable=False,
            message=late.message,
            output=late.output,
            attempt=attempt,
        )
        return
    resolve_outcome(prior, "applied" if found == "applied" else "handoff", stamp=False)
    s.add(
        Reconciliation(
            run_id=run.id,
            command_id=cmd.id,
            attempt=prior.reconcile_attempts + 1,
            result=f"{found}_late",
            detail={"attempt": attempt, "code": late.code},
        )
    )


def _trace(s: Session, run: Run, cmd: Command, events: list[tuple[str, dict[str, Any]]]) -> None:
    append_events(s, run.id, events, step=cmd.step, proposal_id=cmd.proposal_id)
