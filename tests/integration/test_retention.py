"""``warrant ledger prune`` / ``restore`` on the real ledger with real workers: old finished
runs go with every row they own, waiting and newer runs stay, an archive brings them back
equal, and pruning never gets in the way of runs going through the pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import wait_for
from warrant.ledger import retention as ledger_retention
from warrant.ledger.models import MemoryRecord, Run
from warrant.runner.client import retention

pytestmark = [pytest.mark.services, pytest.mark.slow]

TABLES = [Run.__table__, *ledger_retention.OWNED]
SEARCH = {"capability": "search:public", "resource_scope": "public"}


def warrant(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warrant.runner.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


def rows_of(engine: Any, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table a run owns, per table, in a stable order."""
    out = {}
    with engine.connect() as conn:
        for table in TABLES:
            column = table.c.id if table.name == "runs" else table.c.run_id
            q = select(table).where(column.in_(run_ids)).order_by(*table.primary_key.columns)
            out[table.name] = [dict(r._mapping) for r in conn.execute(q)]
    return out


def counts(engine: Any, run_ids: list[str]) -> dict[str, int]:
    return {name: len(rows) for name, rows in rows_of(engine, run_ids).items()}


def age(engine: Any, run_ids: list[str], days: int) -> None:
    """Make runs look finished ``days`` ago (a waiting run gets a finished_at too)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE runs SET finished_at = now() - make_interval(days => :d)"
                " WHERE id = ANY(:ids)"
            ),
            {"d": days, "ids": run_ids},
        )


def memory_spec(outputs: list[dict[str, Any]], subject: str) -> dict[str, Any]:
    spec = sc.spec(
        outputs,
        grants=[SEARCH, {"capability": "memory:write", "resource_scope": f"memory:{subject}/*"}],
    )
    spec["subject"] = subject
    return spec


def save(value: str = "zh-CN") -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": "p2",
        "tool": "save_preference",
        "tool_version": "1",
        "arguments": {"key": "answer_language", "value": value},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def _confirmed_memory_run(client: Any, subject: str) -> str:
    """A run that waited for a confirmation, got it, wrote memory and completed."""
    spec = memory_spec([sc.search("p1"), save(), sc.final("Saved.", "tool-1", "tool-2")], subject)
    info = client.wait(client.start_run(spec), timeout=30)
    assert info.status == "waiting_confirmation"
    client.confirm(info.run_id, proposal_hash=info.confirmation_request["proposal_hash"], by="al")
    done = client.wait(info.run_id, timeout=30)
    assert done.status == "completed", done
    return str(info.run_id)


def test_prune_archive_restore(engine, client, worker, tmp_path: Path):
    plain = client.wait(client.start_run(sc.spec([sc.search("p1"), sc.final("A.", "tool-1")])))
    failed = client.wait(client.start_run(sc.spec([sc.search(f"p{i}") for i in range(6)])))
    assert (plain.status, failed.status) == ("completed", "failed")
    remembered = _confirmed_memory_run(client, "retention-kept")
    waiting = client.wait(
        client.start_run(memory_spec([sc.search("p1"), save()], "retention-waits")), timeout=30
    )
    newer = client.wait(client.start_run(sc.spec([sc.search("p1"), sc.final("N.", "tool-1")])))
    assert (waiting.status, newer.status) == ("waiting_confirmation", "completed")
    old = [plain.run_id, failed.run_id, remembered]
    kept = [waiting.run_id, newer.run_id]
    age(engine, [*old, waiting.run_id], days=400)
    before_old, before_kept = rows_of(engine, old), rows_of(engine, kept)
    assert all(
        before_old[t] for t in ("runs", "proposals", "commands", "outcomes", "trace_records")
    )
    assert before_old["confirmations"] and before_old["observations"] and before_old["grants"]
    memory_before = facts.count(engine, MemoryRecord, created_by_run=remembered)
    assert memory_before == 1

    archive = tmp_path / "old.jsonl.gz"
    out = warrant("ledger", "prune", "--finished-before", "300d", "--archive", str(archive),
                  "--batch", "2", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["runs_pruned"] == 3 and summary["batches"] == 2
    assert summary["rows"] == {t: len(r) for t, r in sorted(before_old.items())}
    assert summary["archive"] == str(archive) and summary["seconds"] >= 0
    assert sum(counts(engine, old).values()) == 0  # every table, every row of the old runs
    assert rows_of(engine, kept) == before_kept  # waiting and newer runs: untouched
    assert facts.count(engine, MemoryRecord, created_by_run=remembered) == 1  # memory stays

    restored = json.loads(warrant("ledger", "restore", str(archive), "--json").stdout)
    assert (restored["runs_restored"], restored["runs_skipped"]) == (3, 0)
    assert rows_of(engine, old) == before_old  # row for row, column for column
    again = warrant("ledger", "restore", str(archive), "--json")
    assert again.returncode == 0
    twice = json.loads(again.stdout)
    assert (twice["runs_restored"], twice["runs_skipped"]) == (0, 3)
    assert rows_of(engine, old) == before_old
    # a restored run is a run like any other: pruned again without an archive
    out = warrant("ledger", "prune", "--finished-before", "300d", "--json")
    assert json.loads(out.stdout)["runs_pruned"] == 3 and sum(counts(engine, old).values()) == 0
    # the waiting run still goes on when confirmed
    request = waiting.confirmation_request
    client.confirm(waiting.run_id, proposal_hash=request["proposal_hash"], by="al")
    assert client.wait(waiting.run_id, timeout=30).status in ("failed", "completed")


def test_unwritable_archive_fails_before_deleting(engine, client, worker, tmp_path: Path):
    info = client.wait(client.start_run(sc.spec([sc.search("p1"), sc.final("A.", "tool-1")])))
    age(engine, [info.run_id], days=500)
    before = rows_of(engine, [info.run_id])
    bad = tmp_path / "no-such-dir" / "a.jsonl.gz"
    out = warrant("ledger", "prune", "--finished-before", "450d", "--archive", str(bad), "--json")
    assert out.returncode == 2
    assert json.loads(out.stdout)["error"]["code"] == "ARCHIVE_UNWRITABLE"
    assert rows_of(engine, [info.run_id]) == before
    warrant("ledger", "prune", "--finished-before", "450d")  # clean up for the other tests
    assert counts(engine, [info.run_id])["runs"] == 0


def test_bad_date_exits_2_invalid_date(services):
    for bad in ("yesterday", "2026-13-01", "30x"):
        out = warrant("ledger", "prune", "--finished-before", bad, "--json")
        assert out.returncode == 2, (bad, out.stdout, out.stderr)
        assert json.loads(out.stdout)["error"]["code"] == "INVALID_DATE"
    human = warrant("ledger", "prune", "--finished-before", "soon")
    assert human.returncode == 2 and "INVALID_DATE" in human.stderr


# --- bulk: many finished runs, cloned from a real one ----------------------------------------

STRIDE = 10**7


def _clone(record: dict[str, Any], k: int) -> dict[str, Any]:
    """Run ``record`` (a decoded archive record) as a new run: new run id, new string ids,
    integer ids moved by ``k * STRIDE``."""
    rid = f"bulk-{k:07d}-{uuid.uuid4().hex[:23]}"
    mapped: dict[str, str] = {}

    def new(old: str | None) -> str | None:
        return None if old is None else mapped.setdefault(old, str(uuid.uuid4()))

    tables: dict[str, list[dict[str, Any]]] = {}
    for name, rows in record["tables"].items():
        out = []
        for row in rows:
            r = dict(row)
            if name == "runs":
                r.update(id=rid, idempotency_key=None, active_command_id=None)
            else:
                r["run_id"] = rid
            if isinstance(r.get("id"), int):
                r["id"] += k * STRIDE
            elif name in ("commands", "confirmations", "handoffs"):
                r["id"] = new(r["id"])
            for col in ("command_id", "confirmation_id"):
                if col in r:
                    r[col] = new(r[col])
            if "proposal_pk" in r:
                r["proposal_pk"] += k * STRIDE
            if name == "artifacts":
                r["idempotency_token"] = uuid.uuid4().hex
            out.append(r)
        tables[name] = out
    return {"run_id": rid, "tables": tables}


def _template(engine: Any, client: Any) -> dict[str, Any]:
    """A real completed run (search, then a final answer), as a decoded record."""
    info = client.wait(client.start_run(sc.spec([sc.search("p1"), sc.final("T.", "tool-1")])))
    assert info.status == "completed"
    rows = rows_of(engine, [info.run_id])
    return {"run_id": info.run_id, "tables": {t: r for t, r in rows.items() if r}}


def bulk_finished(engine: Any, template: dict[str, Any], n: int, *, start: int = 1) -> list[str]:
    """``n`` finished runs like ``template``, inserted 500 per transaction."""
    records = [_clone(template, k) for k in range(start, start + n)]
    for i in range(0, n, 500):
        done, skipped, _ = ledger_retention.restore_records(engine, records[i : i + 500])
        assert (done, skipped) == (len(records[i : i + 500]), 0)
    return [r["run_id"] for r in records]


def test_prune_while_runs_go_through_the_pipeline(engine, client, worker):
    template = _template(engine, client)
    old = bulk_finished(engine, template, 200, start=1)
    age(engine, old, days=900)
    started: list[str] = []
    results: list[Any] = []

    def load() -> None:
        for i in range(20):
            spec = sc.spec([sc.search("p1"), sc.final(f"L{i}.", "tool-1")])
            started.append(client.start_run(spec))
        results.extend(client.wait(r, timeout=60) for r in started)

    thread = threading.Thread(target=load)
    thread.start()
    wait_for(lambda: started, what="the load to start")
    cutoff = datetime.now(UTC) - timedelta(days=800)
    summary = retention.prune(engine, cutoff, batch=5)
    thread.join(120)
    assert not thread.is_alive()
    assert summary["runs_pruned"] >= 200 and summary["batches"] >= 40
    assert sum(counts(engine, old).values()) == 0
    assert [r.status for r in results] == ["completed"] * 20
    assert all(counts(engine, [r])["trace_records"] > 0 for r in started)


def _sizes(engine: Any) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT sum(pg_total_relation_size(c)) FROM unnest(CAST(:t AS regclass[])) c"),
                {"t": [t.name for t in TABLES]},
            ).scalar_one()
        )


def test_prune_throughput_and_space(engine, client, worker, tmp_path: Path):
    """Measures (printed, run with -s): rows and bytes per run, prune throughput."""
    template = _template(engine, client)
    rows_per_run = {t: len(r) for t, r in template["tables"].items()}
    n = int(os.environ.get("WARRANT_TEST_RETENTION_RUNS", "2000"))
    size_before = _sizes(engine)
    ids = bulk_finished(engine, template, n, start=100_000)
    age(engine, ids, days=1200)
    size_loaded = _sizes(engine)
    cutoff = datetime.now(UTC) - timedelta(days=1100)
    began = time.monotonic()
    summary = retention.prune(engine, cutoff, archive=tmp_path / "bulk.jsonl.gz")
    seconds = time.monotonic() - began
    assert summary["runs_pruned"] == n and sum(counts(engine, ids[:50]).values()) == 0
    began = time.monotonic()
    plain = retention.restore(engine, tmp_path / "bulk.jsonl.gz")
    restore_s = time.monotonic() - began
    assert plain["runs_restored"] == n
    began = time.monotonic()
    again = retention.prune(engine, cutoff)
    plain_s = time.monotonic() - began
    assert again["runs_pruned"] == n
    size_pruned = _sizes(engine)
    print(
        f"\nretention: {n} runs; rows per run {sum(rows_per_run.values())} {rows_per_run};"
        f" tables {size_before} -> {size_loaded} bytes ({(size_loaded - size_before) / n:.0f}"
        f" bytes per run), after prune {size_pruned} (space kept for reuse until VACUUM);"
        f" archive {(tmp_path / 'bulk.jsonl.gz').stat().st_size / n:.0f} bytes per run;"
        f" prune+archive {n / seconds:.0f} runs/s, restore {n / restore_s:.0f} runs/s,"
        f" prune {n / plain_s:.0f} runs/s"
    )
