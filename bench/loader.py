"""Bulk loader: a ledger holding months of finished runs, for ``python -m bench.growth``.

    python -m bench.loader DATABASE_URL [--runs N] [--batch N]

Runs one real 3-step run through the pipeline's stages (in-process, as ``bench.profile``
does), reads all its rows from every ledger table, and replicates them ``--runs`` times with
new ids, server-side (``INSERT ... SELECT ... FROM generate_series``: no row crosses the wire,
which beats ``COPY`` from the client, whose every row is sent and parsed), one transaction per
batch. Copies keep the real row shapes (payload sizes, JSON, index keys); ids are new (text
ids are uuid-shaped ``md5`` of a load tag, the copy's number and the old id, so references
between tables stay consistent; bigint ids are shifted past the sequences, which are moved on),
one run in ten is ``failed``, and the timestamps of copy ``g`` of ``n`` are shifted together so
its ``finished_at`` lies ``180 * (1 - g/n)`` days back: the ledger grew in time order.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import sys
import time
from typing import Any

import psycopg

__all__ = ["LoadReport", "load", "recreate", "template_run", "vacuum"]

#: Columns that hold a run id besides ``run_id`` itself.
RUN_ID_COLUMNS = {("runs", "id"), ("memory_records", "created_by_run")}
#: bigint columns that reference another table's bigint id.
BIGINT_REFERENCES = {
    ("commands", "proposal_pk"): "proposals",
    ("runs", "pending_proposal_id"): "proposals",
}
#: Text columns that must stay unique per copy.
UNIQUE_TEXT = {"idempotency_key", "idempotency_token", "trace_id"}
#: Tables other tables reference, in the order they are filled.
PARENTS = ("runs", "proposals", "commands")
DAYS = 180
FAILED_EVERY = 10


@dataclasses.dataclass
class LoadReport:
    runs: int
    steps: int
    rows: int
    seconds: float
    rows_per_table: dict[str, int]

    @property
    def rows_per_s(self) -> float:
        return self.rows / max(self.seconds, 1e-9)


def template_run(url: str, *, steps: int = 3) -> str:
    """One real run of ``steps`` no-op reads driven through the planner, policy and tool
    stages in this process (a recording publisher stands in for Celery); returns its id."""
    os.environ.setdefault("WARRANT_TOOLS", "warrant_demo:plugin")
    from warrant_demo.scenarios import read_steps

    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.broker.policy.stage import policy_evaluate
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.tool.stage import tool_execute
    from warrant.ledger.db import engine_for
    from warrant.runner.client.api import Client

    engine = engine_for(url)
    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher)
    client = Client(engine=engine, publisher=publisher)
    run_id = client.start_run(read_steps(steps))
    while publisher.sent:
        stage, m = publisher.sent.pop(0)
        if stage == "planner":
            planner_step(ctx, m["run_id"], m["version"])
        elif stage == "policy":
            policy_evaluate(ctx, m["run_id"], m["version"])
        else:
            tool_execute(ctx, m["run_id"], m["version"], m["command_id"], tool=m["tool"])
    status = client.get_run(run_id).status
    if status != "completed":
        raise RuntimeError(f"template run {run_id} ended {status}")
    return run_id


@dataclasses.dataclass
class _Table:
    name: str
    columns: list[tuple[str, str]]  # (name, data type)
    key: str  # the column that holds the run id
    id_seq: str | None = None  # the bigint id's sequence
    id_min: int = 0
    id_span: int = 1
    id_base: int = 0


def _ledger_tables(conn: psycopg.Connection[Any], run_id: str) -> list[_Table]:
    """Every table holding rows of ``run_id``, with its template rows in ``tpl_<table>``."""
    cols: dict[str, list[tuple[str, str]]] = {}
    for table, column, dtype in conn.execute(
        "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c"
        " JOIN information_schema.tables t USING (table_schema, table_name)"
        " WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'"  # not the views
        " ORDER BY c.table_name, c.ordinal_position"
    ):
        cols.setdefault(table, []).append((column, dtype))
    out = []
    for name, columns in cols.items():
        names = {c for c, _ in columns}
        key = "id" if name == "runs" else "run_id" if "run_id" in names else None
        if key is None:
            continue
        conn.execute(f"DROP TABLE IF EXISTS tpl_{name}")
        conn.execute(
            f"CREATE TEMP TABLE tpl_{name} AS SELECT * FROM {name} WHERE {key} = %s", (run_id,)
        )
        count, lo, hi = conn.execute(
            f"SELECT count(*), {'min(id), max(id)' if 'id' in names else '0, 0'} FROM tpl_{name}"
        ).fetchone() or (0, 0, 0)
        if not count:
            continue
        table = _Table(name, columns, key)
        seq = (
            conn.execute("SELECT pg_get_serial_sequence(%s, 'id')", (name,)).fetchone()
            if "id" in names
            else None
        )
        if seq and seq[0]:
            table.id_seq, table.id_min, table.id_span = seq[0], lo, hi - lo + 1
        out.append(table)
    # parents first (foreign keys): runs, proposals, commands, then the rest
    return sorted(out, key=lambda t: (PARENTS.index(t.name) if t.name in PARENTS else 9, t.name))


def _string_ids(conn: psycopg.Connection[Any], tables: list[_Table]) -> set[str]:
    """The template's text primary keys (command, confirmation, handoff ids): remapped per
    copy wherever they occur."""
    out: set[str] = set()
    for t in tables:
        if t.name != "runs" and ("id", "character varying") in t.columns:
            out |= {r[0] for r in conn.execute(f"SELECT id FROM tpl_{t.name}")}
    return out


def _expression(
    conn: psycopg.Connection[Any],
    t: _Table,
    column: str,
    dtype: str,
    ids: set[str],
    by_name: dict[str, _Table],
) -> str:
    """The copy's value of ``column`` (``g``: the copy's number, ``%(tag)s``: the load's)."""
    if column == t.key or (t.name, column) in RUN_ID_COLUMNS:
        return "md5(%(tag)s::text || g)::uuid::text"
    if dtype == "timestamp with time zone":
        return f"{column} + shift"
    serial = column == "id" and t.id_seq is not None
    if dtype == "bigint" and (serial or (t.name, column) in BIGINT_REFERENCES):
        ref = t if column == "id" else by_name[BIGINT_REFERENCES[(t.name, column)]]
        return f"{column} - {ref.id_min} + {ref.id_base} + (g - 1) * {ref.id_span}"
    if t.name == "runs" and column == "status":
        return f"CASE WHEN g %% {FAILED_EVERY} = 0 THEN 'failed' ELSE status END"
    if t.name == "runs" and column == "stop_reason":
        return f"CASE WHEN g %% {FAILED_EVERY} = 0 THEN 'TOOL_FAILED' ELSE stop_reason END"
    if column in UNIQUE_TEXT:
        return f"CASE WHEN {column} IS NULL THEN NULL ELSE md5(%(tag)s::text || g || {column}) END"
    if dtype == "character varying" and ids:
        values = {r[0] for r in conn.execute(f"SELECT DISTINCT {column} FROM tpl_{t.name}") if r[0]}
        if values and values <= ids:
            return f"md5(%(tag)s::text || g || ':' || {column})::uuid::text"
    return column


def _insert_statements(
    conn: psycopg.Connection[Any], tables: list[_Table], run_id: str
) -> list[str]:
    by_name = {t.name: t for t in tables}
    ids = _string_ids(conn, tables)
    for t in tables:
        if t.id_seq:
            (t.id_base,) = conn.execute(
                f"SELECT coalesce(max(id), 0) + 1 FROM {t.name}"
            ).fetchone() or (1,)
    out = []
    for t in tables:
        names = ", ".join(c for c, _ in t.columns)
        exprs = ", ".join(_expression(conn, t, c, dt, ids, by_name) for c, dt in t.columns)
        out.append(
            f"INSERT INTO {t.name} ({names}) SELECT {exprs} FROM tpl_{t.name},"
            " LATERAL (SELECT g, now() - %(days)s::int * interval '1 day'"
            " * (1 - g::float8 / %(n)s::float8)"
            f" - (SELECT finished_at FROM tpl_runs) AS shift"
            " FROM generate_series(%(first)s::int, %(last)s::int) AS g) AS copies"
        )
    return out


def load(url: str, *, runs: int, batch: int = 5000, template: str | None = None) -> LoadReport:
    """Add ``runs`` finished copies of ``template`` (default: a new real 3-step run) to the
    ledger at ``url``, printing progress and rows/s; returns the totals."""
    run_id = template or template_run(url)
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        conn.execute("SET synchronous_commit = off")
        tables = _ledger_tables(conn, run_id)
        statements = _insert_statements(conn, tables, run_id)
        (steps,) = conn.execute("SELECT step FROM tpl_runs").fetchone() or (0,)
        conn.commit()
        per_table = {t.name: 0 for t in tables}
        tag, t0, done, rows = f"bulk-{secrets.token_hex(4)}-", time.perf_counter(), 0, 0
        while done < runs:
            last = min(runs, done + batch)
            params = {"tag": tag, "days": DAYS, "n": runs, "first": done + 1, "last": last}
            for t, statement in zip(tables, statements, strict=True):
                n = conn.execute(statement, params).rowcount
                per_table[t.name] += n
                rows += n
            for t in tables:
                if t.id_seq:
                    conn.execute(
                        "SELECT setval(%s, %s)", (t.id_seq, t.id_base - 1 + last * t.id_span)
                    )
            conn.commit()
            done = last
            spent = time.perf_counter() - t0
            print(
                f"\rloaded {done:,}/{runs:,} runs, {rows:,} rows, {rows / spent:,.0f} rows/s,"
                f" {done / spent:,.0f} runs/s, eta {(runs - done) * spent / done:,.0f} s",
                end="" if sys.stdout.isatty() else "\n",
                flush=True,
            )
        print()
    seconds = time.perf_counter() - t0
    return LoadReport(runs, runs * steps, rows, seconds, per_table)


def recreate(url: str) -> None:
    """A new, migrated ledger database at ``url`` (dropped first if it exists)."""
    from warrant.ledger.migrate import upgrade

    admin, name = url.rsplit("/", 1)
    with psycopg.connect(admin + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    upgrade(url)


def vacuum(url: str) -> float:
    """``VACUUM ANALYZE`` the ledger (what autovacuum does to a months-old ledger: statistics,
    hint bits and the visibility map); returns the seconds it took."""
    t0 = time.perf_counter()
    with psycopg.connect(
        url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    ) as c:
        c.execute("VACUUM ANALYZE")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url", help="the ledger's database (already migrated)")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=5000, help="runs per transaction")
    args = parser.parse_args()
    report = load(args.url, runs=args.runs, batch=args.batch)
    print(
        f"{report.runs:,} runs ({report.steps:,} steps), {report.rows:,} rows in"
        f" {report.seconds:,.1f} s: {report.rows_per_s:,.0f} rows/s;"
        f" VACUUM ANALYZE {vacuum(args.url):,.1f} s"
    )


if __name__ == "__main__":
    main()
