"""What the client reads: runs, their pending proposal, trace and observations, handoffs —
queries only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from warrant.ledger.models import Handoff, Observation, PreApproval, Proposal, Run, TraceEvent

__all__ = [
    "handoff_by_id_or_run",
    "handoffs",
    "observations",
    "pending_proposal",
    "pre_approvals",
    "run",
    "run_exists",
    "runs",
    "trace",
]


def run(s: Session, run_id: str) -> Run | None:
    """The run ``run_id`` (``None`` if there is none)."""
    return s.get(Run, run_id)


def pending_proposal(s: Session, run: Run) -> Proposal | None:
    """The proposal the run waits on (``None`` if it waits on none)."""
    return s.get(Proposal, run.pending_proposal_id) if run.pending_proposal_id else None


def run_exists(s: Session, run_id: str) -> bool:
    return bool(s.scalar(select(exists().where(Run.id == run_id))))


def runs(s: Session, *, limit: int, status: str | None = None) -> Sequence[Run]:
    """The newest runs first (only those at ``status``, if given)."""
    q = select(Run).order_by(Run.created_at.desc()).limit(limit)
    if status:
        q = q.where(Run.status == status)
    return s.scalars(q).all()


def trace(s: Session, run_id: str) -> Sequence[TraceEvent]:
    """The run's trace events in order."""
    return s.scalars(
        select(TraceEvent).where(TraceEvent.run_id == run_id).order_by(TraceEvent.seq)
    ).all()


def observations(s: Session, run_id: str) -> Sequence[Observation]:
    """The run's observations in the order they were made."""
    return s.scalars(
        select(Observation).where(Observation.run_id == run_id).order_by(Observation.id)
    ).all()


def handoffs(s: Session, *, open_only: bool, limit: int) -> Sequence[Handoff]:
    """The newest handoffs first (only unresolved ones if ``open_only``)."""
    q = select(Handoff).order_by(Handoff.created_at.desc()).limit(limit)
    if open_only:
        q = q.where(Handoff.resolved_at.is_(None))
    return s.scalars(q).all()


def handoff_by_id_or_run(s: Session, key: str) -> Handoff | None:
    """The handoff with id ``key``, else the newest handoff of the run ``key``."""
    return (
        s.get(Handoff, key)
        or s.scalars(
            select(Handoff).where(Handoff.run_id == key).order_by(Handoff.created_at.desc())
        ).first()
    )


def pre_approvals(s: Session, run_id: str) -> list[dict[str, Any]]:
    """The run's pre-approved proposals, oldest first, with who approved each and its use."""
    rows = s.scalars(
        select(PreApproval).where(PreApproval.run_id == run_id).order_by(PreApproval.id)
    )
    return [
        {
            "pre_approval_id": a.id,
            "tool": a.tool,
            "tool_version": a.tool_version,
            "arguments": a.arguments,
            "proposal_hash": a.proposal_hash,
            "approved_by": a.approved_by,
            "approved_at": a.approved_at.isoformat(),
            "used_at": a.used_at.isoformat() if a.used_at else None,
            "used_by_proposal": a.used_by_proposal,
        }
        for a in rows
    ]
