"""An operator's grant before it is added to a running run: its wall-clock expiry (an
absolute ``expires_at``, or ``expires_in_s`` counted on the database's clock) and whether it
widens a standing grant of its capability (:mod:`warrant.runner.grant_bounds`).

A grant within a standing grant (a narrowing) is added freely; a wider one is refused
``GRANT_WIDENING_REFUSED`` unless the operator says ``widen``, and then the trace records
``grant.widened`` with the standing grant it exceeds (``before``), the new one (``after``) and
the bounds on which it is wider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from warrant.ledger.models import GrantRow
from warrant.ledger.operator import database_now, standing_grants
from warrant.runner.errors import SpecError, StateConflict
from warrant.runner.grant_bounds import Bounds, ResourceKind, widening
from warrant.runner.spec import Grant, GrantConstraints
from warrant.tools._registry import Registry

__all__ = ["Admission", "admit", "capability_kinds"]

#: The longest relative expiry an operator may give (a week, like a run's deadline).
MAX_EXPIRES_IN_S = 7 * 24 * 3600.0


@dataclass(frozen=True, kw_only=True)
class Admission:
    expires_at: float | None
    """The grant's wall-clock end, epoch seconds on the database's clock."""
    events: list[tuple[str, dict[str, Any]]]
    """``grant.widened`` when the operator widened a standing grant; else none."""


def capability_kinds(registry: Registry, capability: str) -> frozenset[ResourceKind | None]:
    """How the tools that need ``capability`` read a scope: their resource kinds, ``None`` for
    a tool with one untyped resource (empty: no such tool; every reading counts)."""
    kinds: set[ResourceKind | None] = set()
    for tool in registry:
        if capability in tool.capabilities:
            kinds.update(tool.resources.values() if tool.resources else (None,))
    return frozenset(kinds)


def _bounds(row: GrantRow) -> Bounds:
    return Bounds(
        resource_scope=row.resource_scope,
        expires_at=row.expires_at.timestamp() if row.expires_at is not None else None,
        expires_at_step=row.expires_at_step,
        uses_left=None if row.max_uses is None else max(0, row.max_uses - row.uses),
        destinations_from=frozenset(row.destinations_from)
        if row.destinations_from is not None
        else None,
        constraints=GrantConstraints.model_validate(row.constraints) if row.constraints else None,
    )


def _expires_at(s: Session, grant: Grant, expires_in_s: float | None) -> float | None:
    if expires_in_s is None:
        return grant.expires_at.timestamp() if grant.expires_at is not None else None
    if grant.expires_at is not None or not 0 < expires_in_s <= MAX_EXPIRES_IN_S:
        message = f"more than 0 and at most {MAX_EXPIRES_IN_S:.0f} s, and not with expires_at"
        raise SpecError(message, errors=[{"field": "expires_in_s", "message": message}])
    return database_now(s) + expires_in_s


def admit(
    s: Session,
    run_id: str,
    grant: Grant,
    *,
    expires_in_s: float | None,
    widen: bool,
    by: str,
    registry: Registry,
) -> Admission:
    """The grant's expiry and, if it widens a standing grant, the ``grant.widened`` event; a
    widening without ``widen`` raises :class:`StateConflict` ``GRANT_WIDENING_REFUSED``."""
    expires_at = _expires_at(s, grant, expires_in_s)
    added = Bounds(
        resource_scope=grant.resource_scope,
        expires_at=expires_at,
        expires_at_step=grant.expires_at_step,
        uses_left=grant.max_uses,
        destinations_from=frozenset(grant.destinations_from)
        if grant.destinations_from is not None
        else None,
        constraints=grant.constraints,
    )
    standing = [_bounds(row) for row in standing_grants(s, run_id, grant.capability)]
    found = widening(added, standing, kinds=capability_kinds(registry, grant.capability))
    if found is None:
        return Admission(expires_at=expires_at, events=[])
    if not widen:
        raise StateConflict(
            f"this grant is wider than the run's standing {grant.capability} grant on "
            f"{', '.join(found.wider_on)}: say widen (CLI --widen) to widen it",
            code="GRANT_WIDENING_REFUSED",
        )
    details = {
        "capability": grant.capability,
        "by": by,
        "wider_on": list(found.wider_on),
        "before": found.closest.shown(),
        "after": added.shown(),
    }
    return Admission(expires_at=expires_at, events=[("grant.widened", details)])
