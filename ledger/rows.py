"""Rows the stages' rare paths work on under row locks (the ORM session path).

The hot path uses single statements (:mod:`warrant.ledger.repo`); a cancel, a retry, a
reconciliation or a handoff locks the run and its command first and works on the rows.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select, update
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

__all__ = [
    "attempt_outcome",
    "command",
    "command_outcomes",
    "lock_command",
    "lock_run",
    "outcome",
    "run",
    "set_proposal",
]


def lock_run(s: Session, run_id: str) -> Run | None:
    """The run, locked until the session ends."""
    return s.get(Run, run_id, with_for_update=True)


def run(s: Session, run_id: str) -> Run | None:
    return s.get(Run, run_id)


def lock_command(s: Session, command_id: str) -> Command | None:
    """The command, locked until the session ends."""
    return s.get(Command, command_id, with_for_update=True)


def command(s: Session, command_id: str) -> Command | None:
    return s.get(Command, command_id)


def outcome(s: Session, outcome_id: int) -> OutcomeRow | None:
    return s.get(OutcomeRow, outcome_id)


def attempt_outcome(s: Session, command_id: str, attempt: int) -> OutcomeRow | None:
    """The outcome recorded for one attempt of a command, locked."""
    return s.scalars(
        select(OutcomeRow)
        .where(OutcomeRow.command_id == command_id, OutcomeRow.attempt == attempt)
        .with_for_update()
    ).first()


def command_outcomes(s: Session, command_id: str) -> list[OutcomeRow]:
    """Every outcome recorded for a command (one per attempt), oldest first."""
    return list(
        s.scalars(
            select(OutcomeRow).where(OutcomeRow.command_id == command_id).order_by(OutcomeRow.id)
        ).all()
    )


def set_proposal(s: Session, proposal_pk: int, **values: Any) -> None:
    s.execute(update(Proposal).where(Proposal.id == proposal_pk).values(**values))


# -- What a handoff bundle shows, read from the ledger, and the handoff row itself.


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
