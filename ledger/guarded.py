"""Guarded writes: statements that run inside a run transition's compare-and-set
(:func:`warrant.ledger.repo.transition`) and write only if it won.

Each builder returns a :class:`~warrant.ledger.repo.Guarded`: a shape (the statement's cache
key), a function building the statement from the CAS result, and its parameters. Built
statements are cached per shape.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, any_, bindparam, exists, literal, select, update
from sqlalchemy.dialects.postgresql import ARRAY, insert

from warrant.ledger.chain import row_hash
from warrant.ledger.models import (
    Command,
    Confirmation,
    GrantRow,
    OutcomeRow,
    PreApproval,
    Proposal,
)
from warrant.ledger.repo import Guarded
from warrant.runner.codes import CommandStatus

__all__ = [
    "complete_command",
    "insert_command",
    "insert_outcome",
    "insert_proposal",
    "rearm_command",
    "update_proposal",
    "use_confirmation",
    "use_grants",
    "use_pre_approval",
]


def _insert(table: Any, values: dict[str, Any], prefix: str, *, id_column: str | None = None):
    """A builder for an ``INSERT ... SELECT`` of one row from the CAS result; with
    ``id_column``, the row's id is that column of the CAS result."""
    keys = tuple(sorted(values))

    def build(cas: Any) -> Any:
        cols = [bindparam(f"{prefix}{k}", type_=table.c[k].type) for k in keys]
        names = list(keys)
        if id_column is not None:
            cols.insert(0, cas.c[id_column])
            names.insert(0, "id")
        return insert(table).from_select(
            names, select(*cols).select_from(cas), include_defaults=False
        )

    return build


def _guarded(
    shape: str, build: Any, prefix: str, values: dict[str, Any], *, table: str | None = None
) -> Guarded:
    """``table``: the decision row ``values`` is, its hash carried by the transition's trace
    (:data:`warrant.ledger.chain.ROW_COLUMNS`)."""
    rows = () if table is None else ((table, row_hash(table, values)),)
    return Guarded(shape, build, {f"{prefix}{k}": v for k, v in values.items()}, rows)


_BUILDERS: dict[str, Any] = {}


def _cached(shape: str, factory: Any) -> Any:
    build = _BUILDERS.get(shape)
    if build is None:
        build = _BUILDERS[shape] = factory()
    return build


def insert_proposal(values: dict[str, Any], *, pending: bool = False) -> Guarded:
    """The step's proposal. ``pending``: its id is the run's new ``pending_proposal_id``
    (pass ``NEXT_PROPOSAL_ID`` for that change); otherwise it gets its own id (refused,
    final or stopping proposals)."""
    table: Any = Proposal.__table__
    keys = tuple(sorted(values))
    shape = f"proposal.insert:{pending}:" + ",".join(keys)
    id_column = "pending_proposal_id" if pending else None
    build = _cached(shape, lambda: _insert(table, values, "p_", id_column=id_column))
    return _guarded(shape, build, "p_", values, table="proposals")


def _won(cas: Any) -> Any:
    """True when the transition's compare-and-set updated the run."""
    return exists(select(literal(1)).select_from(cas))


def _update(table: Any, key_column: str, values: dict[str, Any], prefix: str) -> Any:
    keys = tuple(sorted(values))

    def build(cas: Any) -> Any:
        return (
            update(table)
            .where(
                table.c[key_column] == bindparam(f"{prefix}key", type_=table.c[key_column].type),
                _won(cas),
            )
            .values({k: bindparam(f"{prefix}{k}", type_=table.c[k].type) for k in keys})
        )

    return build


def _updated(table: Any, kind: str, key: Any, values: dict[str, Any], prefix: str) -> Guarded:
    """The row of ``table`` whose id is ``key`` set to ``values``; ``kind`` names the shape."""
    shape = f"{kind}:" + ",".join(sorted(values))
    build = _cached(shape, lambda: _update(table, "id", values, prefix))
    return _guarded(shape, build, prefix, {**values, "key": key})


def update_proposal(pk: int, values: dict[str, Any]) -> Guarded:
    return _updated(Proposal.__table__, "proposal.update", pk, values, "pu_")


def insert_command(values: dict[str, Any]) -> Guarded:
    table: Any = Command.__table__
    shape = "command.insert:" + ",".join(sorted(values))
    build = _cached(shape, lambda: _insert(table, values, "ci_"))
    return _guarded(shape, build, "ci_", values, table="commands")


def complete_command(command_id: str, values: dict[str, Any]) -> Guarded:
    return _updated(Command.__table__, "command.update", command_id, values, "cu_")


def rearm_command(command_id: str, values: dict[str, Any], *, row: dict[str, Any]) -> Guarded:
    """The command refused by its tool for a permission is issued again (its own token, a new
    attempt: ``warrant.runner.permission_wait``); its earlier outcomes stay. ``row``: the
    command as it is once issued again, whose hash the transition's trace records."""
    cleared = {"started_at": None, "finished_at": None, "heartbeat_at": None, "worker": None}
    values = {**values, **cleared, "status": CommandStatus.ISSUED.value}
    rearmed = _updated(Command.__table__, "command.rearm", command_id, values, "cr_")
    return replace(rearmed, rows=(("commands", row_hash("commands", row)),))


def insert_outcome(values: dict[str, Any]) -> Guarded:
    """The command's one outcome (a second one for the same attempt is not inserted)."""
    table: Any = OutcomeRow.__table__
    keys = tuple(sorted(values))
    shape = "outcome.insert:" + ",".join(keys)

    def factory() -> Any:
        base = _insert(table, values, "oi_")
        return lambda cas: base(cas).on_conflict_do_nothing(
            constraint="uq_outcomes_command_attempt"
        )

    return _guarded(shape, _cached(shape, factory), "oi_", values, table="outcomes")


def use_grants(grant_ids: list[int]) -> Guarded:
    table: Any = GrantRow.__table__

    def factory() -> Any:
        return lambda cas: (
            update(table)
            .where(
                table.c.id == any_(bindparam("gu_ids", type_=ARRAY(BigInteger))),
                _won(cas),
            )
            .values(uses=table.c.uses + 1)
        )

    return Guarded("grants.use", _cached("grants.use", factory), {"gu_ids": list(grant_ids)})


def use_pre_approval(pre_approval_id: int, proposal_id: str | None, at: datetime) -> Guarded:
    table: Any = PreApproval.__table__
    values = {"used_at": 1, "used_by_proposal": 1}
    return Guarded(
        "pre_approval.use",
        _cached("pre_approval.use", lambda: _update(table, "id", values, "pa_")),
        {"pa_key": pre_approval_id, "pa_used_at": at, "pa_used_by_proposal": proposal_id},
    )


def use_confirmation(confirmation_id: str, at: datetime) -> Guarded:
    table: Any = Confirmation.__table__
    return Guarded(
        "confirmation.use",
        _cached("confirmation.use", lambda: _update(table, "id", {"used": 1, "used_at": 1}, "cf_")),
        {"cf_key": confirmation_id, "cf_used": True, "cf_used_at": at},
    )
