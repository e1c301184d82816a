"""Rows the stages' rare paths work on under row locks (the ORM session path).

The hot path uses single statements (:mod:`warrant.ledger.repo`); a cancel, a retry, a
reconciliation or a handoff locks the run and its command first and works on the rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from warrant.ledger.models import Command, OutcomeRow, Proposal, Run

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
