"""Retention: remove finished runs and every row they own, in short batches; put them back.

The ledger only grows (every step adds trace events, observations, proposals and commands),
so an operator prunes runs that ended long ago (``warrant ledger prune``), optionally writing
them first to an archive that ``warrant ledger restore`` reads back.

What a run owns. Every table with a foreign key to ``runs.id`` (all ``ON DELETE CASCADE``) was
looked at; :data:`OWNED` lists them and ``tests/unit/test_retention_archive.py`` fails when a
new one appears without a decision here:

* ``proposals``, ``caller_keys``, ``commands``, ``outcomes`` (the attempts),
  ``reconciliations``, ``observations``, ``trace_records``, ``grants``, ``confirmations``,
  ``pre_approvals``, ``artifacts``, ``webhook_deliveries``: facts of that run only; removed
  with it (the cascade would remove them anyway: they are deleted explicitly, children first,
  to count them and to archive exactly the rows deleted, ``DELETE … RETURNING``).
* ``handoffs``: removed only when resolved. A run with an open handoff is never selected,
  whatever its status (a person still has to decide about it).
* ``memory_records`` is kept: a long-term memory record belongs to its subject and outlives
  the run that wrote it (``created_by_run`` is a plain column, no foreign key, and may name a
  pruned run). ``api_tokens`` and ``worker_registrations`` belong to no run.

Which runs. ``completed``, ``failed`` or ``cancelled`` with ``finished_at`` before the cutoff
and no open handoff. A run waiting for a person (``waiting_confirmation``, ``needs_input``,
``handoff``), ``reconciling``, ``running`` or ``cancelling`` is never selected, whatever its
``finished_at``.

Never in the stages' way. Each batch is its own short transaction that locks its runs with
``FOR UPDATE SKIP LOCKED``: a run a stage is committing is skipped (the next batch takes it),
never waited for, and the lock re-checks the status, so a run reopened by a late effect since
the selection is not taken. A stage that inserts a row of a locked run waits for the batch's
commit (milliseconds); the indexes of migration 0012 keep that short (the cutoff's ordered
scan, and the cascade checks of ``commands.proposal_pk`` and ``reconciliations.command_id``,
which were sequential scans per deleted row).

Anchors. Each batch first records its runs' chain heads in one ``ledger_anchors`` row
(:mod:`warrant.ledger.chain_store`, migration 0018), in the same transaction as the deletes,
and each archived run carries its head: ``warrant ledger verify`` shows a removed range was a
prune's, and ``--archive`` re-checks the archived chains against the anchor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    DateTime,
    Engine,
    Table,
    Text,
    bindparam,
    cast,
    delete,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, insert

from warrant.ledger.chain_store import heads_of, record_anchor
from warrant.ledger.db import unbounded
from warrant.ledger.models import (
    Artifact,
    Base,
    CallerKey,
    Command,
    Confirmation,
    GrantRow,
    Handoff,
    Observation,
    OutcomeRow,
    PreApproval,
    Proposal,
    Reconciliation,
    Run,
    TraceRecord,
    WebhookDelivery,
)

__all__ = [
    "KEPT",
    "OWNED",
    "PRUNABLE_STATUSES",
    "Record",
    "candidates",
    "decode_record",
    "prune_batch",
    "restore_records",
    "tables_referencing_runs",
]

#: The statuses a run may be pruned in (the terminal ones).
PRUNABLE_STATUSES = ("completed", "failed", "cancelled")

_RUNS: Table = Run.__table__  # type: ignore[assignment]
_TRACE: Table = TraceRecord.__table__  # type: ignore[assignment]

#: The tables a run owns, children before parents (the order of the deletes; restore inserts
#: in the reverse order).
OWNED: tuple[Table, ...] = tuple(
    m.__table__  # type: ignore[misc]
    for m in (
        TraceRecord,
        Observation,
        Reconciliation,
        OutcomeRow,
        Command,
        Confirmation,
        PreApproval,
        GrantRow,
        Proposal,
        CallerKey,
        Artifact,
        Handoff,
        WebhookDelivery,
    )
)

#: Tables that name a run but are not the run's: never pruned (see the module docstring).
KEPT = ("memory_records",)

#: One archived run: ``{"run_id": …, "tables": {"runs": [row], "proposals": [rows], …},
#: "anchor": {"batch_id", "anchor_hash", "last_seq", "hash"}}`` (its head in its batch's anchor).
Record = dict[str, Any]

_SELECT = text(
    """
SELECT r.id FROM runs r
 WHERE r.status IN ('completed', 'failed', 'cancelled')
   AND r.finished_at < :cutoff
   AND NOT EXISTS (SELECT 1 FROM handoffs h WHERE h.run_id = r.id AND h.resolved_at IS NULL)
 ORDER BY r.finished_at
 LIMIT :limit
 FOR UPDATE OF r SKIP LOCKED
"""
)

_COUNT = text(
    """
SELECT count(*) FROM runs r
 WHERE r.status IN ('completed', 'failed', 'cancelled')
   AND r.finished_at < :cutoff
   AND NOT EXISTS (SELECT 1 FROM handoffs h WHERE h.run_id = r.id AND h.resolved_at IS NULL)
"""
)


def tables_referencing_runs() -> set[str]:
    """Every table of the models with a foreign key to ``runs.id`` (but ``runs`` itself: a
    child's ``parent_run_id`` is set to ``NULL`` when its parent goes)."""
    return {
        t.name
        for t in Base.metadata.tables.values()
        if t.name != "runs" and any(fk.column.table.name == "runs" for fk in t.foreign_keys)
    }


def candidates(engine: Engine, cutoff: datetime) -> int:
    """How many runs a prune with ``cutoff`` would remove now (for a progress bar)."""
    with engine.connect() as conn:
        unbounded(conn)  # whole-ledger scans and big deletes: no statement timeout
        return int(conn.execute(_COUNT, {"cutoff": cutoff}).scalar_one())


def prune_batch(
    engine: Engine,
    cutoff: datetime,
    limit: int,
    *,
    archive: Callable[[list[Record]], None] | None = None,
) -> tuple[list[str], dict[str, int]]:
    """Remove up to ``limit`` prunable runs finished before ``cutoff`` in one transaction:
    (their ids, rows deleted per table). With ``archive``, it is called with one
    :data:`Record` per run before the transaction commits; if it raises, nothing is deleted."""
    with engine.begin() as conn:
        unbounded(conn)  # whole-ledger scans and big deletes: no statement timeout
        ids = list(conn.execute(_SELECT, {"cutoff": cutoff, "limit": limit}).scalars())
        if not ids:
            return [], {}
        counts: dict[str, int] = {}
        rows: dict[str, list[dict[str, Any]]] = {}
        anchor = record_anchor(conn, heads_of(conn, ids))  # before the rows go
        for table in (*OWNED, _RUNS):
            column = table.c.id if table is _RUNS else table.c.run_id
            stmt = delete(table).where(column.in_(ids))
            if archive is None:
                counts[str(table.name)] = conn.execute(stmt).rowcount
                continue
            names = [c.name for c in table.c]
            found = [
                dict(zip(names, r, strict=True))
                for r in conn.execute(stmt.returning(*_archived_columns(table)))
            ]
            rows[str(table.name)] = found  # a plain str: the archive's JSON keys
            counts[str(table.name)] = len(found)
        if archive is not None:
            archive(_records(rows, anchor))
    return ids, counts


def _records(rows: dict[str, list[dict[str, Any]]], anchor: dict[str, Any]) -> list[Record]:
    """The deleted rows grouped by run, tables in insert order; each with its head in the
    batch's anchor (``{"batch_id", "anchor_hash", "last_seq", "hash"}``)."""
    batch = {"batch_id": anchor["batch_id"], "anchor_hash": anchor["anchor_hash"]}
    by_run: dict[str, Record] = {
        rid: {"run_id": rid, "tables": {}, "anchor": {**batch, "last_seq": last, "hash": h}}
        for rid, last, h in anchor["heads"]
    }
    for table in (_RUNS, *reversed(OWNED)):
        key = "id" if table is _RUNS else "run_id"
        for row in rows.get(table.name, ()):
            by_run[row[key]]["tables"].setdefault(str(table.name), []).append(row)
    return list(by_run.values())


_TABLES: dict[str, Table] = {str(t.name): t for t in (_RUNS, *OWNED)}
_DATETIMES: dict[str, frozenset[str]] = {
    t.name: frozenset(c.name for c in t.columns if isinstance(c.type, DateTime))
    for t in _TABLES.values()
}


def decode_record(record: Record) -> Record:
    """An archived record (JSON: timestamps as ISO 8601 text) with its timestamps as
    ``datetime`` again; an unknown table or column raises ``KeyError``."""
    tables: dict[str, list[dict[str, Any]]] = {}
    for name, rows in _current_tables(record["tables"]).items():
        table, stamps = _TABLES[name], _DATETIMES[name]
        decoded = []
        for row in rows:
            for column in row:
                table.c[column]  # raises KeyError for a column the table lacks
            decoded.append(
                {
                    k: datetime.fromisoformat(v) if k in stamps and isinstance(v, str) else v
                    for k, v in row.items()
                }
            )
        tables[name] = decoded
    return {"run_id": record["run_id"], "tables": tables}


def _current_tables(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """An archive written before migration 0013 holds ``trace_events`` rows: each becomes a
    ``trace_records`` row of one event (its number kept)."""
    old = tables.get("trace_events")
    if old is None:
        return tables
    records = [
        {
            "run_id": e["run_id"],
            "seq": e["seq"],
            "step": e["step"],
            "proposal_id": e.get("proposal_id"),
            "events": [[e["event"], e.get("details", {})]],
            "created_at": e["created_at"],
        }
        for e in old
    ]
    return {k: v for k, v in tables.items() if k != "trace_events"} | {"trace_records": records}


def restore_records(engine: Engine, records: Iterable[Record]) -> tuple[int, int, dict[str, int]]:
    """Insert decoded records in one transaction: (runs restored, runs skipped because a run
    with that id exists, rows inserted per table). Idempotent per run."""
    restored = skipped = 0
    counts: dict[str, int] = {}
    with engine.begin() as conn:
        unbounded(conn)  # whole-ledger scans and big deletes: no statement timeout
        for record in records:
            tables = record["tables"]
            run = insert(_RUNS).values(tables["runs"]).on_conflict_do_nothing(index_elements=["id"])
            if conn.execute(run.returning(_RUNS.c.id)).first() is None:
                skipped += 1
                continue
            restored += 1
            counts["runs"] = counts.get("runs", 0) + 1
            for table in reversed(OWNED):
                rows = tables.get(table.name)
                if rows and table is _TRACE:
                    _restore_trace(conn, rows)
                elif rows:
                    conn.execute(insert(table), rows)
                    counts[str(table.name)] = counts.get(str(table.name), 0) + len(rows)
        if restored:
            _advance_sequences(conn)
    return restored, skipped, counts


def _archived_columns(table: Table) -> list[Any]:
    """What an archive keeps of ``table``'s rows: every column; a trace record's events as
    their exact ``jsonb`` text (a number such as ``5.000`` kept as written, so the restored
    record hashes as before and the archive re-checks its chain exactly)."""
    if table is not _TRACE:
        return list(table.c)
    return [cast(c, Text).label("events") if c.name == "events" else c for c in table.c]


def _restore_trace(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Trace records in ``seq`` order (the chain trigger links each to the one before), the
    events from their ``jsonb`` text (an archive before 0018 holds them as JSON values)."""
    ordered = sorted(rows, key=lambda r: (r["run_id"], r["seq"]))
    params = [
        {k: v for k, v in r.items() if k != "events"}
        | {"events_text": e if isinstance(e := r["events"], str) else json.dumps(e)}
        for r in ordered
    ]
    stmt = insert(_TRACE).values(events=cast(bindparam("events_text", type_=Text), JSONB))
    conn.execute(stmt, params)


def _advance_sequences(conn: Connection) -> None:
    """Restored rows keep their ids: a sequence behind them (a restore into a new database)
    is moved past them, so the next insert does not collide."""
    for table in OWNED:
        if "id" not in table.c or table.c.id.autoincrement is not True:
            continue
        top = conn.execute(select(func.max(table.c.id))).scalar()
        if top is None:
            continue
        conn.execute(
            text(
                "SELECT setval(s, :top) FROM (SELECT pg_get_serial_sequence(:t, 'id') AS s) x"
                " WHERE s IS NOT NULL AND :top > coalesce(pg_sequence_last_value(s::regclass), 0)"
            ),
            {"t": table.name, "top": top},
        )
