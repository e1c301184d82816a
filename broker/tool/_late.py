"""An attempt that finishes after its command moved on: what it found is still a fact.

An attempt concludes its command only while it is the command's current attempt
(``started`` at that attempt number). When it is not — the command was completed by someone
else, or re-issued — the attempt never transitions the run; but if it made (or may have
made) an effect, the ledger must not keep saying the effect did not happen:

- its attempt's ``unknown`` outcome, still unresolved: left to the reconciler, whose status
  query now finds the effect;
- that outcome already resolved ``not_applied`` (or no outcome at all): corrected to what the
  attempt found, and unless the run is back on this very command (whose next attempt reuses
  the idempotency token, so it finds the same effect), the run goes to a person with a
  handoff bundle;
- a read, or a write known not applied: only traced (``tool.attempt.superseded``);
- an effect another attempt of the command already recorded as applied (same command, so the
  same idempotency token; the same output, or an idempotent write's uncertain outcome): the
  one effect is already in the ledger, so the attempt is only traced
  (``tool.attempt.superseded`` with ``effect: already_recorded``) and never reopens its run —
  only an effect the ledger does not know goes to a person.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from warrant.broker.handoff_entry import enter_handoff
from warrant.ledger import rows
from warrant.ledger.models import Command, Reconciliation, Run
from warrant.ledger.repo import append_events, record_outcome
from warrant.ledger.row_updates import resolve_outcome
from warrant.runner.codes import Outcome, Phase, RunStatus, StopReason
from warrant.tools._contract import SideEffect, Tool

__all__ = ["LateOutcome", "late_outcome", "record_late"]


@dataclass(frozen=True, kw_only=True)
class LateOutcome:
    attempt: int
    status: Outcome
    code: str | None
    message: str | None
    output: dict[str, Any] | None


def late_outcome(result: Any, attempt: int) -> LateOutcome:
    """The parts of a tool stage result that a late record keeps."""
    return LateOutcome(
        attempt=attempt,
        status=result.status,
        code=result.code,
        message=result.message,
        output=result.output,
    )


def record_late(
    ctx: Any,
    s: Session,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    late: LateOutcome,
    outbox: Any,
) -> str:
    """Record what a no-longer-current attempt found (``run`` and ``cmd`` locked)."""
    prior = rows.attempt_outcome(s, cmd.id, late.attempt)
    if prior is not None and (prior.status, prior.code) == (late.status.value, late.code):
        # Its own record, committed before a lost connection hid the commit from it.
        if run.status == RunStatus.RUNNING and run.phase == Phase.PLANNING:
            outbox.add(partial(ctx.publisher.planner, run.id, run.version))
        return "duplicate"
    write = tool.side_effect is not SideEffect.READ
    applied = write and late.status is Outcome.SUCCEEDED
    uncertain = write and late.status is Outcome.UNKNOWN
    details = {
        "tool": cmd.tool,
        "attempt": late.attempt,
        "current_attempt": cmd.attempts,
        "command_status": cmd.status,
        "status": late.status.value,
        "code": late.code,
    }
    if not (applied or uncertain):
        _trace(s, run, cmd, [("tool.attempt.superseded", details)])
        return "superseded"
    recorded = _recorded_effect(s, cmd, tool, late)
    if recorded is not None:
        details |= {"effect": "already_recorded", "recorded_attempt": recorded}
        _trace(s, run, cmd, [("tool.attempt.superseded", details)])
        return "superseded"
    if prior is not None and prior.status == Outcome.UNKNOWN.value and not prior.resolved_status:
        # The reconciler's status query will find what this attempt did.
        _trace(s, run, cmd, [("tool.attempt.superseded", details)])
        return "superseded"
    found = "applied" if applied else "unknown"
    _correct(s, run, cmd, late, prior, found)
    events = [("effect.found_late", {**details, "effect": found})]
    status = RunStatus(run.status)
    same_command_again = not status.terminal and run.active_command_id == cmd.id
    if same_command_again or status is RunStatus.HANDOFF:
        _trace(s, run, cmd, events)
        return "late_recorded"
    s.flush()
    enter_handoff(
        s,
        run,
        reason=StopReason.UNKNOWN_EFFECT.value,
        registry=ctx.registry,
        events=events,
        late_effect=True,
    )
    return "late_handoff"


def _recorded_effect(
    s: Session, cmd: Command, tool: Tool[Any, Any], late: LateOutcome
) -> int | None:
    """The attempt whose recorded outcome already is the effect ``late`` found, if any: an
    attempt of the same command (the same idempotency token) that concluded applied, with the
    very output ``late`` got back — or any output, if ``late`` is uncertain and the tool is
    idempotent per token (whatever it did is that same effect)."""
    same_token = tool.side_effect is SideEffect.IDEMPOTENT_WRITE
    for other in rows.command_outcomes(s, cmd.id):
        if other.attempt == late.attempt:
            continue
        if not (other.status == Outcome.SUCCEEDED.value or other.resolved_status == "applied"):
            continue
        if late.status is Outcome.SUCCEEDED and other.output == late.output:
            return int(other.attempt)
        if late.status is Outcome.UNKNOWN and same_token:
            return int(other.attempt)
    return None


def _correct(s: Session, run: Run, cmd: Command, late: LateOutcome, prior: Any, found: str) -> None:
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
            attempt=late.attempt,
        )
        return
    resolve_outcome(prior, "applied" if found == "applied" else "handoff", stamp=False)
    s.add(
        Reconciliation(
            run_id=run.id,
            command_id=cmd.id,
            attempt=prior.reconcile_attempts + 1,
            result=f"{found}_late",
            detail={"attempt": late.attempt, "code": late.code},
        )
    )


def _trace(s: Session, run: Run, cmd: Command, events: list[tuple[str, dict[str, Any]]]) -> None:
    append_events(s, run.id, events, step=cmd.step, proposal_id=cmd.proposal_id)
