"""The state the approver saw (``Tool.precondition``; :mod:`warrant.tools._contract`).

The policy stage reads it when it requests a confirmation (:func:`precondition_shown`: its
fingerprint and summary go into the request, and the approval keeps the fingerprint). The
tool stage reads it again after the claim, just before the call (:func:`before_execution`):

* unchanged: the call runs (traced ``precondition.checked``);
* moved: the call does not run. The command is concluded ``rejected``
  ``PRECONDITION_CHANGED`` (traced ``precondition.changed`` with both fingerprints) and, in the
  same compare-and-set, the same proposal waits for a person again at the next step, with the
  new fingerprint; the old approval was spent by the command, so it cannot be used again;
* unreadable (the read raised or answered no JSON): fail closed. The attempt fails
  ``PRECONDITION_UNREADABLE`` (retryable: the tool's retry budget reads again; once it is
  spent the planner sees the failure) and the call does not run.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from warrant.broker.context import StageContext
from warrant.broker.tool._call import Snapshot, ToolResult
from warrant.broker.tool.record import outcome_values, record
from warrant.ledger.db import session_scope
from warrant.ledger.guarded import complete_command, insert_outcome, insert_proposal
from warrant.ledger.repo import NewObservation, StaleVersion, append_events, commit, to_datetime
from warrant.ledger.stage_loads import PROPOSAL_COPIED, autocommit, command_proposal
from warrant.runner import policy
from warrant.runner import run_machine as machine
from warrant.runner.codes import (
    CommandStatus,
    ObservationKind,
    ObservationSource,
    Outcome,
    RunStatus,
)
from warrant.runner.confirmation_rules import request_clock
from warrant.runner.tool_outcomes import prechecked
from warrant.runner.views import RunView
from warrant.tools._contract import (
    PRECONDITION_CHANGED,
    PRECONDITION_UNREADABLE,
    Fingerprint,
    PreconditionContext,
    Tool,
    fingerprint_of,
    moved,
)

__all__ = ["before_execution", "precondition_shown"]

log = logging.getLogger("warrant.tool")


def _read(
    ctx: StageContext, tool: Tool[Any, Any], arguments: dict[str, Any], run_id: str, subject: str
) -> Fingerprint:
    assert tool.precondition is not None
    args = tool.parse_input(arguments)
    reading = PreconditionContext(run_id=run_id, subject=subject, deps=ctx.deps_for(tool))
    return fingerprint_of(tool.precondition(args, reading))


def precondition_shown(
    ctx: StageContext, decision: policy.AwaitConfirmation, view: RunView
) -> dict[str, Any] | None:
    """What the confirmation request shows of the tool's precondition (None: it has none).
    A failed read still asks the person (shown ``PRECONDITION_UNREADABLE``, bound to no
    fingerprint: the tool stage then reads again and asks again before anything runs)."""
    tool = decision.tool
    if tool.precondition is None:
        return None
    try:
        return _read(ctx, tool, decision.arguments, view.run_id, view.subject).shown()
    except Exception:
        log.warning("the precondition read of %s failed", tool.name, exc_info=True)
        return {"fingerprint": None, "error": PRECONDITION_UNREADABLE}


def before_execution(
    ctx: StageContext, tool: Tool[Any, Any], snap: Snapshot
) -> ToolResult | str | None:
    """None: the call may run. A :class:`ToolResult`: it must not (the tool's ``precheck``
    refused it, or a read failed; the caller records it like an outcome). A string: the state
    moved, the refusal and the new request are recorded (what the tool stage returns)."""
    if tool.precheck is not None:  # the tool's business check, with its service's client
        deps = ctx.deps_for(tool)
        reading = PreconditionContext(run_id=snap.run_id, subject=snap.subject, deps=deps)
        refusal = prechecked(tool, snap.arguments, reading, attempt=snap.attempt)
        if refusal is not None:
            return refusal
    if tool.precondition is None or snap.confirmation_id is None:
        return None
    with autocommit(ctx.engine) as conn:
        approved = command_proposal(conn, snap.command_id)
    try:
        now = _read(ctx, tool, snap.arguments, snap.run_id, snap.subject)
    except Exception as exc:
        log.warning("the precondition read of %s failed", tool.name, exc_info=True)
        why = f"the precondition could not be read ({type(exc).__name__}); the call did not run"
        unreadable = {"tool": tool.name, "error": type(exc).__name__, "attempt": snap.attempt}
        return ToolResult(
            Outcome.FAILED,
            PRECONDITION_UNREADABLE,
            why,
            retryable=True,
            events=[("precondition.unreadable", unreadable)],
        )
    seen = approved.approved_fingerprint if approved is not None else None
    if approved is None or moved(seen, now):
        return _ask_again(ctx, tool, snap, approved, now)
    checked = {"tool": tool.name, "fingerprint": now.digest, "attempt": snap.attempt}
    with session_scope(ctx.engine) as s:
        append_events(
            s,
            snap.run_id,
            [("precondition.checked", checked)],
            step=snap.step,
            proposal_id=snap.proposal_id,
        )
    return None


def _ask_again(
    ctx: StageContext, tool: Tool[Any, Any], snap: Snapshot, approved: Any, now: Fingerprint
) -> str:
    """The moved state: the command concluded ``rejected``, the same proposal waiting for a
    person at the next step with the new fingerprint, in one compare-and-set (still at the
    claim's version and attempt; else the general path records the refusal alone)."""
    seen = approved.approved_fingerprint if approved is not None else None
    message = "the state the approver saw has changed; the call did not run and is asked again"
    output = {"approved_fingerprint": seen, "fingerprint": now.digest, "summary": now.summary}
    refusal = ToolResult(Outcome.REJECTED, PRECONDITION_CHANGED, message, output=output)
    if approved is None:
        return record(ctx, snap, tool, refusal)
    step, view = snap.step + 1, snap.view
    at_claim = dataclasses.replace(view, version=snap.version, status=RunStatus.RUNNING)
    changed = {"tool": tool.name, "command_id": snap.command_id, "attempt": snap.attempt}
    changed |= {"approved_fingerprint": seen, "fingerprint": now.digest}
    completed = {"tool": tool.name, "status": "rejected", "code": PRECONDITION_CHANGED}
    change = machine.request_confirmation(
        at_claim,
        proposal_hash=approved.proposal_hash,
        tool=tool.name,
        events=[("precondition.changed", changed), ("tool.completed", completed)],
    )
    run_changes = {"step": step, "pending_proposal_id": machine.NEXT_PROPOSAL_ID}
    change = dataclasses.replace(
        change, changes={**change.changes, **run_changes, "active_command_id": None}
    )
    try:
        with autocommit(ctx.engine) as conn:
            commit(
                conn,
                change,
                step=snap.step,
                proposal_id=snap.proposal_id,
                observation=_observation(tool, snap, refusal),
                guarded=_writes(ctx, snap, approved, refusal, now, step),
                current_attempt=(snap.command_id, snap.attempt),
            )
    except StaleVersion:  # cancelled or superseded meanwhile: the locked path sorts it out
        return record(ctx, snap, tool, refusal)
    return f"rejected:{PRECONDITION_CHANGED}"


def _observation(tool: Tool[Any, Any], snap: Snapshot, refusal: ToolResult) -> NewObservation:
    """What the planner will see of the refused call (the program's words)."""
    content: dict[str, Any] = {"tool": tool.name, "status": refusal.status.value}
    content["code"] = refusal.code
    content |= {"message": refusal.message, "output": refusal.output}
    return NewObservation(
        f"tool-{snap.step}",
        ObservationKind.TOOL_RESULT,
        ObservationSource.POLICY.value,
        content,
    )


def _writes(
    ctx: StageContext,
    snap: Snapshot,
    approved: Any,
    refusal: ToolResult,
    now: Fingerprint,
    step: int,
) -> list[Any]:
    """The refused command's conclusion and outcome, and the proposal asked again."""
    at = ctx.clock()
    view = snap.view
    request = dict(approved.confirmation_request or {})
    request |= {
        "precondition": now.shown(),
        "approved_by": [],
        **request_clock(view.budgets, deadline_at=view.deadline_at, now=at),
        "expires_at_step": step + view.budgets.confirmation_steps,
        "asked_again": {"code": PRECONDITION_CHANGED, "after_command": snap.command_id},
    }
    proposal = {c: getattr(approved, c) for c in PROPOSAL_COPIED}
    proposal |= {
        "run_id": snap.run_id,
        "step": step,
        "observation_version": view.observation_version + 1,
        "status": "waiting_confirmation",
        "confirmation_request": request,
    }
    finished = {"status": CommandStatus.COMPLETED.value, "finished_at": to_datetime(at)}
    return [
        complete_command(snap.command_id, finished),
        insert_outcome(outcome_values(snap, refusal, None)),
        insert_proposal(proposal, pending=True),
    ]
