"""The reads an operator's grant needs before it is added: the database's time (a relative
``expires_in_s`` is counted on it, like every expiry the gate judges) and the run's standing
grants of one capability (to tell a narrowing from a widening)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from warrant.ledger.models import GrantRow

__all__ = ["database_now", "standing_grants"]


def database_now(s: Session) -> float:
    """The database's clock (epoch seconds), never this host's."""
    return float(s.execute(select(func.extract("epoch", func.clock_timestamp()))).scalar_one())


def standing_grants(s: Session, run_id: str, capability: str) -> list[GrantRow]:
    """Every grant of ``capability`` the run holds (from its spec or an operator), oldest
    first."""
    query = (
        select(GrantRow)
        .where(GrantRow.run_id == run_id, GrantRow.capability == capability)
        .order_by(GrantRow.id)
    )
    return list(s.scalars(query))
