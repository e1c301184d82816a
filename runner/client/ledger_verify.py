"""``warrant ledger verify``: check the trace's hash chain of every run (or one) and the prune
anchors; or an archive against its anchors. The chain and its canonical text are
:mod:`warrant.ledger.chain`; the rows, :mod:`warrant.ledger.chain_store`.

What a break is: the first record, in ``seq`` order, whose link fails (``edited``,
``deleted``, ``reordered``, ``inserted``; see :class:`warrant.ledger.chain.Break`), or a
decision row (``outcomes``, ``proposals``, ``confirmations``) whose content hash no record of
its run's intact chain holds (``row_edited``: the table, its key and ``id``), or an anchor
whose hash its heads do not give (``anchor_mismatch``), or, for an archive, a run whose chain
does not end in the head its anchor kept, or a batch without an anchor row
(``anchor_missing``). :class:`LedgerTampered` (``LEDGER_TAMPERED``) names it. A run whose
trace records no row hash (written before row hashes were) has its rows counted as
unchecked (``rows_unchecked``).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from warrant.ledger import chain_store
from warrant.ledger.chain import (
    ROW_KEYS,
    Break,
    ChainRow,
    Head,
    anchor_hash,
    check_run,
    jsonb_text,
    recorded_row_hashes,
    row_hash,
)
from warrant.ledger.db import unbounded
from warrant.runner.client.retention import OnProgress, read_archive
from warrant.runner.errors import LedgerTampered, RunNotFound

__all__ = ["verify", "verify_archive"]


def _tampered(found: dict[str, Any], summary: dict[str, Any]) -> LedgerTampered:
    where = f"run {found['run_id']} seq {found['seq']}" if found.get("run_id") else ""
    if found.get("table"):
        key = ", ".join(f"{k} {v}" for k, v in found["key"].items())
        where = f"run {found['run_id']} {found['table']} row ({key})"
    batch = f" batch {found['batch_id']}" if found.get("batch_id") else ""
    message = f"the ledger was tampered with: {found['kind']} at {where}{batch}: {found['detail']}"
    return LedgerTampered(message, found={**found, "summary": summary})


def verify(
    engine: Engine, run: str | None = None, *, on_progress: OnProgress | None = None
) -> dict[str, Any]:
    """Check every run's chain (or ``run``'s: a whole id or a unique prefix) and, for all
    runs, every prune anchor. The summary; :class:`LedgerTampered` on the first break."""
    started = time.monotonic()
    if run is not None:
        found = chain_store.match_runs(engine, run)
        if not found or (len(found) > 1 and found[0] != run):
            raise RunNotFound(f"no run {run}" if not found else f"{run!r} names several runs")
        total, chunks = 1, iter([[found[0]]])
    else:
        total, chunks = chain_store.run_id_chunks(engine)
    summary: dict[str, Any] = {"runs_checked": 0, "records_checked": 0, "anchors_checked": 0}
    summary |= {"rows_checked": 0, "rows_unchecked": 0}
    heads: list[dict[str, Any]] = []
    with engine.connect() as conn:
        unbounded(conn)
        for ids in chunks:
            decisions = chain_store.decision_rows(conn, ids)
            for rid, (allocated, rows) in sorted(chain_store.read_chains(conn, ids).items()):
                outcome = check_run(rid, rows, allocated)
                summary["runs_checked"] += 1
                summary["records_checked"] += len(rows)
                if isinstance(outcome, Break):
                    raise _tampered(outcome.to_dict(), summary)
                _check_rows(rid, rows, decisions.get(rid, []), summary)
                heads.append({"run_id": rid, "last_seq": outcome.last_seq, "hash": outcome.hash})
            if on_progress is not None:
                on_progress(summary["runs_checked"], total)
        if run is None:
            pruned = 0
            for a in chain_store.anchors(conn):
                summary["anchors_checked"] += 1
                pruned += a["runs"]
                if anchor_hash(a["heads"]) != a["anchor_hash"] or a["runs"] != len(a["heads"]):
                    bad: dict[str, Any] = {"run_id": None, "seq": None, "kind": "anchor_mismatch"}
                    bad |= {"batch_id": a["batch_id"], "detail": "its heads do not give its hash"}
                    raise _tampered(bad, summary)
            summary["runs_pruned"] = pruned
    if run is not None:
        summary["head"] = heads[0]
    summary["intact"] = True
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def _check_rows(
    run_id: str,
    records: list[ChainRow],
    decisions: list[chain_store.DecisionRow],
    summary: dict[str, Any],
) -> None:
    """Every decision row of an intact run must have the content a record of its chain
    hashed (:func:`warrant.ledger.chain.row_hash`): else :class:`LedgerTampered`
    ``row_edited`` naming the row."""
    recorded = recorded_row_hashes(e for r in records for e in json.loads(r.events_text))
    if not recorded:  # a run recorded before row hashes were
        summary["rows_unchecked"] += len(decisions)
        return
    for row in decisions:
        table = row["table"]
        summary["rows_checked"] += 1
        if row_hash(table, row) not in recorded.get(table, ()):
            key = {k: row[k] for k in ROW_KEYS[table]}
            found = {"run_id": run_id, "seq": None, "kind": "row_edited", "table": table}
            detail = "no record of the run's trace holds its content (edited, or written by hand)"
            raise _tampered(found | {"key": key, "detail": detail}, summary)


def _archived_chain(record: dict[str, Any]) -> Break | Head:
    tables = record["tables"]
    rows = sorted(tables.get("trace_records", []), key=lambda r: r["seq"])
    texts = [r["events"] if isinstance(r["events"], str) else jsonb_text(r["events"]) for r in rows]
    chain = [
        ChainRow(
            seq=r["seq"],
            step=r["step"],
            proposal_id=r.get("proposal_id"),
            created_at=datetime.fromisoformat(r["created_at"]),
            events_text=events,
            n_events=len(json.loads(events)),
            prev_hash=r.get("prev_hash") or "",
            hash=r.get("hash") or "",
        )
        for r, events in zip(rows, texts, strict=True)
    ]
    run = tables.get("runs", [{}])[0]
    return check_run(record["run_id"], chain, run.get("trace_seq"))


def verify_archive(
    engine: Engine | None, path: str | Path, *, on_progress: OnProgress | None = None
) -> dict[str, Any]:
    """Re-check every archived run's chain, that it ends in the head its batch's anchor kept,
    that each batch's heads give its anchor hash, and (with ``engine``) that the ledger holds
    that anchor row. The summary; :class:`LedgerTampered` on the first break."""
    started = time.monotonic()
    summary: dict[str, Any] = {"runs_checked": 0, "records_checked": 0, "anchors_checked": 0}
    batches: dict[str, tuple[str, list[list[Any]]]] = {}
    truncated: list[bool] = [False]
    for record in read_archive(path, truncated=truncated):
        anchor = record.get("anchor")
        outcome = _archived_chain(record)
        summary["runs_checked"] += 1
        summary["records_checked"] += len(record["tables"].get("trace_records", []))
        if isinstance(outcome, Break):
            raise _tampered(outcome.to_dict(), summary)
        if anchor is None:  # written before migration 0017: nothing to hold it to
            continue
        if (outcome.last_seq, outcome.hash) != (anchor["last_seq"], anchor["hash"]):
            found = {"run_id": record["run_id"], "seq": outcome.last_seq}
            found |= {"kind": "anchor_mismatch", "batch_id": anchor["batch_id"]}
            raise _tampered(found | {"detail": "its chain does not end in its anchor"}, summary)
        batch = batches.setdefault(anchor["batch_id"], (anchor["anchor_hash"], []))
        batch[1].append([record["run_id"], outcome.last_seq, outcome.hash])
        if on_progress is not None:
            on_progress(summary["runs_checked"], 0)
    if truncated[0] and batches:  # a torn last batch: its runs were never deleted
        batches.pop(list(batches)[-1])
    summary["truncated"] = truncated[0]
    stored: dict[str, str] | None = None
    if engine is not None:
        with engine.connect() as conn:
            stored = {a["batch_id"]: a["anchor_hash"] for a in chain_store.anchors(conn)}
    for batch_id, (kept, heads) in batches.items():
        summary["anchors_checked"] += 1
        found = {"run_id": None, "seq": None, "batch_id": batch_id}
        if anchor_hash(heads) != kept:
            raise _tampered(found | {"kind": "anchor_mismatch", "detail": "heads differ"}, summary)
        if stored is not None and stored.get(batch_id) != kept:
            detail = "the ledger has no such anchor" if batch_id not in stored else "differs"
            raise _tampered(found | {"kind": "anchor_missing", "detail": detail}, summary)
    summary["intact"] = True
    summary["archive"] = str(path)
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary
