"""What a handoff bundle shows, read from the ledger, and the handoff row itself."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from warrant.ledger.models import (
    Command,
    Handoff,
    Observation,
    OutcomeRow,
    Proposal,
    Reconciliation,
    Run,
)

__all__ = ["add_handoff", "observations", "pending_proposal", "unknown_effects"]


def unknown_effects(
    s: Session, run_id: str
) -> list[tuple[OutcomeRow, Command, list[Reconciliation]]]:
    """The run's ``unknown`` outcomes, accepted jobs and effects whose postcondition failed,
    each with its command and its reconciliation (or poll) history."""
    rows = s.execute(
        select(OutcomeRow, Command)
        .join(Command, Command.id == OutcomeRow.command_id)
        .where(
            OutcomeRow.run_id == run_id,
            OutcomeRow.status.in_(["unknown", "accepted"])
            | (OutcomeRow.code == "TOOL_POSTCONDITION_FAILED"),
        )
        .order_by(OutcomeRow.id)
    ).all()
    out = []
    for outcome, cmd in rows:
        history = s.scalars(
            select(Reconciliation)
            .where(Reconciliation.command_id == cmd.id)
            .order_by(Reconciliation.id)
        ).all()
        out.append((outcome, cmd, list(history)))
    return out


def observations(s: Session, run_id: str) -> list[dict[str, Any]]:
    return [
        {
            "observation_id": o.observation_id,
            "kind": o.kind,
            "source": o.source,
            "step": o.step,
            "content": o.content,
        }
        for o in s.scalars(
            select(Observation).where(Observation.run_id == run_id).order_by(Observation.id)
        )
    ]


def pending_proposal(s: Session, run: Run) -> Proposal | None:
    """The proposal the run waits on, or the one its active command came from."""
    proposal_pk = run.pending_proposal_id
    if proposal_pk is None and run.active_command_id:
        cmd = s.get(Command, run.active_command_id)
        proposal_pk = cmd.proposal_pk if cmd else None
    return s.get(Proposal, proposal_pk) if proposal_pk is not None else None


def add_handoff(s: Session, run_id: str, *, reason: str, bundle: dict[str, Any]) -> str:
    handoff_id = str(uuid.uuid4())
    s.add(Handoff(id=handoff_id, run_id=run_id, reason=reason, bundle=bundle))
    s.flush()
    return handoff_id
