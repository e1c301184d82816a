"""The trace chain's reads and the prune anchors' rows (the SQL behind
:mod:`warrant.ledger.chain`; migration 0018)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, text

from warrant.ledger.chain import GENESIS, ROW_COLUMNS, ROW_KEYS, ChainRow, anchor_hash
from warrant.ledger.db import unbounded

__all__ = [
    "DecisionRow",
    "anchors",
    "decision_rows",
    "heads_of",
    "match_runs",
    "read_chains",
    "record_anchor",
    "run_id_chunks",
]


class DecisionRow(dict[str, Any]):
    """One decision row as ``ledger verify`` reads it: its :data:`ROW_KEYS` and
    :data:`ROW_COLUMNS`, with ``table`` and ``run_id``."""


#: Per table, the statement reading its rows of some runs (what its hash covers, what names it).
_DECISION_ROWS = {
    table: text(
        f"SELECT {', '.join(dict.fromkeys(('run_id', *ROW_KEYS[table], *columns)))} "
        f"FROM {table} WHERE run_id = ANY(:ids) ORDER BY id"
    )
    for table, columns in ROW_COLUMNS.items()
}


def decision_rows(conn: Connection, ids: Sequence[str]) -> dict[str, list[DecisionRow]]:
    """Per run: its ``outcomes``, ``proposals`` and ``confirmations`` rows (one read per
    table for all of ``ids``)."""
    found: dict[str, list[DecisionRow]] = {}
    for table, statement in _DECISION_ROWS.items():
        for row in conn.execute(statement, {"ids": list(ids)}).mappings():
            found.setdefault(row["run_id"], []).append(DecisionRow(row, table=table))
    return found


_CHAINS = text(
    """
SELECT r.id, r.trace_seq, t.seq, t.step, t.proposal_id, t.created_at, t.events::text,
       jsonb_array_length(t.events), t.prev_hash, t.hash
  FROM runs r LEFT JOIN trace_records t ON t.run_id = r.id
 WHERE r.id = ANY(:ids)
 ORDER BY r.id, t.seq
"""
)

_HEADS = text(
    """
SELECT DISTINCT ON (run_id) run_id, seq + jsonb_array_length(events) - 1, hash
  FROM trace_records WHERE run_id = ANY(:ids)
 ORDER BY run_id, seq DESC
"""
)


def run_id_chunks(engine: Engine, size: int = 200) -> tuple[int, Iterator[list[str]]]:
    """How many runs there are, and their ids in chunks of ``size`` (by id)."""
    with engine.connect() as conn:
        unbounded(conn)
        ids = list(conn.execute(text("SELECT id FROM runs ORDER BY id")).scalars())
    return len(ids), (ids[i : i + size] for i in range(0, len(ids), size))


def read_chains(conn: Connection, ids: Sequence[str]) -> dict[str, tuple[int, list[ChainRow]]]:
    """Per run: its ``trace_seq`` and its records in ``seq`` order, the events as
    ``jsonb::text``."""
    chains: dict[str, tuple[int, list[ChainRow]]] = {}
    for rid, allocated, seq, step, pid, at, events, n, prev, h in conn.execute(
        _CHAINS, {"ids": list(ids)}
    ):
        _, rows = chains.setdefault(rid, (allocated, []))
        if seq is not None:
            rows.append(ChainRow(seq, step, pid, at, events, n, prev, h))
    return chains


def heads_of(conn: Connection, ids: Sequence[str]) -> list[list[Any]]:
    """``[run_id, last_seq, final_hash]`` per run, by id (a run without records: 0 and
    :data:`GENESIS`)."""
    found = {rid: [rid, last, h] for rid, last, h in conn.execute(_HEADS, {"ids": list(ids)})}
    return [found.get(rid, [rid, 0, GENESIS]) for rid in sorted(ids)]


def record_anchor(conn: Connection, heads: list[list[Any]]) -> dict[str, Any]:
    """Insert one ``ledger_anchors`` row for a prune batch's heads; the row as a dict."""
    row = {
        "batch_id": str(uuid.uuid4()),
        "runs": len(heads),
        "heads": heads,
        "anchor_hash": anchor_hash(heads),
    }
    conn.execute(
        text(
            "INSERT INTO ledger_anchors (batch_id, runs, heads, anchor_hash) "
            "VALUES (:batch_id, :runs, CAST(:heads AS jsonb), :anchor_hash)"
        ),
        {**row, "heads": _json(heads)},
    )
    return row


def anchors(conn: Connection) -> list[dict[str, Any]]:
    """Every anchor row, oldest first."""
    rows = conn.execute(
        text(
            "SELECT batch_id, created_at, runs, heads, anchor_hash FROM ledger_anchors "
            "ORDER BY created_at, batch_id"
        )
    ).mappings()
    return [dict(r) for r in rows]


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def match_runs(engine: Engine, key: str) -> list[str]:
    """Run ids equal to ``key`` or starting with it (at most two)."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT id FROM runs WHERE id = :k OR id LIKE :p ORDER BY id <> :k, id LIMIT 2"
                ),
                {"k": key, "p": key.replace("%", "").replace("_", "\\_") + "%"},
            ).scalars()
        )
