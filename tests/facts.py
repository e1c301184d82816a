"""Reading facts from the ledger for assertions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, MemoryRecord, OutcomeRow, Proposal, TraceEvent


def count(engine: Any, model: Any, **where: Any) -> int:
    with session_scope(engine) as s:
        q = select(func.count()).select_from(model)
        for k, v in where.items():
            q = q.where(getattr(model, k) == v)
        return int(s.execute(q).scalar_one())


def events(engine: Any, run_id: str, name: str | None = None) -> list[TraceEvent]:
    with session_scope(engine) as s:
        q = select(TraceEvent).where(TraceEvent.run_id == run_id).order_by(TraceEvent.seq)
        if name:
            q = q.where(TraceEvent.event == name)
        return list(s.scalars(q))


def rejection_codes(engine: Any, run_id: str) -> list[str]:
    return [e.details["code"] for e in events(engine, run_id, "proposal.rejected")]


def commands(engine: Any, run_id: str) -> int:
    return count(engine, Command, run_id=run_id)


def outcomes(engine: Any, run_id: str) -> int:
    return count(engine, OutcomeRow, run_id=run_id)


def proposals(engine: Any, run_id: str) -> int:
    return count(engine, Proposal, run_id=run_id)


def memory(engine: Any, subject: str) -> int:
    return count(engine, MemoryRecord, subject=subject)
