"""What the client reads: runs, their pending proposal, trace and observations, handoffs —
queries only."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import exists, or_, select
from sqlalchemy.orm import Session

from warrant.ledger.models import Handoff, Observation, PreApproval, Proposal, Run, TraceEvent

__all__ = [
    "cited_observations",
    "handoff_by_id_or_run",
    "handoffs",
    "ids_by_prefix",
    "observations",
    "pending_proposal",
    "pre_approvals",
    "run",
    "run_exists",
    "run_state",
    "runs",
    "runs_page",
    "trace",
    "waiting_confirmations",
]


def run(s: Session, run_id: str) -> Run | None:
    """The run ``run_id`` (``None`` if there is none)."""
    return s.get(Run, run_id)


def pending_proposal(s: Session, run: Run) -> Proposal | None:
    """The proposal the run waits on (``None`` if it waits on none)."""
    return s.get(Proposal, run.pending_proposal_id) if run.pending_proposal_id else None


def waiting_confirmations(s: Session, *, limit: int) -> list[tuple[Run, Proposal]]:
    """The runs waiting for a person's confirmation, each with its pending proposal, the one
    waiting longest first."""
    q = (
        select(Run, Proposal)
        .join(Proposal, Proposal.id == Run.pending_proposal_id)
        .where(Run.status == "waiting_confirmation")
        .order_by(Run.updated_at, Run.id)
        .limit(limit)
    )
    return [(run, proposal) for run, proposal in s.execute(q)]


def cited_observations(s: Session, run_id: str, ids: Sequence[str]) -> Sequence[Observation]:
    """The run's observations among ``ids``, in the order they were made."""
    if not ids:
        return []
    q = (
        select(Observation)
        .where(Observation.run_id == run_id, Observation.observation_id.in_(list(ids)))
        .order_by(Observation.id)
    )
    return s.scalars(q).all()


def run_exists(s: Session, run_id: str) -> bool:
    return bool(s.scalar(select(exists().where(Run.id == run_id))))


def runs(s: Session, *, limit: int, status: str | None = None) -> Sequence[Run]:
    """The newest runs first (only those at ``status``, if given)."""
    q = select(Run).order_by(Run.created_at.desc()).limit(limit)
    if status:
        q = q.where(Run.status == status)
    return s.scalars(q).all()


def runs_page(
    s: Session,
    *,
    limit: int,
    status: str | None = None,
    subject: str | None = None,
    created_since: datetime | None = None,
    tool: str | None = None,
    before: tuple[datetime, str] | None = None,
) -> Sequence[Run]:
    """One page of runs, newest first by ``(created_at, id)`` (the HTTP API's listing).

    Filters: ``status``, ``subject``, created at or after ``created_since``, and runs that
    proposed ``tool`` (a semi-join on proposals, by their run id). ``before`` is the last
    ``(created_at, id)`` of the previous page (keyset pagination): the plan walks
    ``ix_runs_created`` backwards and sorts equal ``created_at`` values by id on the way."""
    q = select(Run).order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)
    if status:
        q = q.where(Run.status == status)
    if subject:
        q = q.where(Run.subject == subject)
    if created_since is not None:
        q = q.where(Run.created_at >= created_since)
    if tool:
        q = q.where(exists().where(Proposal.run_id == Run.id, Proposal.tool == tool))
    if before is not None:
        at, run_id = before
        q = q.where(Run.created_at <= at, or_(Run.created_at < at, Run.id < run_id))
    return s.scalars(q).all()


def run_state(s: Session, run_id: str) -> tuple[str, int] | None:
    """The run's status and version alone (what a long poll compares), ``None`` if none."""
    row = s.execute(select(Run.status, Run.version).where(Run.id == run_id)).first()
    return None if row is None else (row[0], row[1])


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


def ids_by_prefix(s: Session, key: str, *, kind: str, min_length: int) -> list[str]:
    """What id ``key`` names, for commands that accept an id prefix: ``[key]`` if a run
    (``kind="handoff"``: a handoff, or a run with one) has that id; else the ids (two at most:
    enough to tell unique from ambiguous) that start with ``key``, if it has at least
    ``min_length`` characters. A handoff prefix matches handoff ids first, then run ids."""
    exact = handoff_by_id_or_run(s, key) if kind == "handoff" else s.get(Run, key)
    if exact is not None:
        return [key]
    if len(key) < min_length:
        return []
    pattern = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    columns = (Handoff.id, Handoff.run_id) if kind == "handoff" else (Run.id,)
    for column in columns:
        q = select(column).where(column.like(pattern, escape="\\")).distinct().limit(2)
        found = list(s.scalars(q))
        if found:
            return found
    return []
