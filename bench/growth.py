"""Flat as the ledger grows: step, sweep and planner-read cost on an empty ledger vs one
holding months of finished runs, and the disk each step leaves behind.

    python -m bench.growth [--runs N] [--quick] [--rounds N] [--reuse]

Two databases next to the benchmark's (``<db>_empty`` and ``<db>_loaded``); the loaded one gets
``--runs`` finished copies of a real 3-step run (:mod:`bench.loader`). Both are then measured in
alternating rounds (ABBA; this machine's speed drifts and a drift weighs on both alike), each
round: the warrant pipeline of ``python -m bench`` (one worker per stage queue, started as
``warrant worker`` would, restarted on the round's database) for per-step latency and
throughput; the reconciler's sweep (best of 5, as ``tests/integration/test_reconciler.py`` times
it); the planner's read (:func:`warrant.ledger.stage_loads.load_planning`) of runs of the
template's shape (on the loaded ledger: copies from the middle of the load). Prints each figure
empty vs loaded with the ratio and whether it is within 10 %, then the bytes per step of every
ledger table and its indexes, with ``EXPLAIN ANALYZE`` of a read that is not flat.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from typing import Any

from bench.__main__ import (
    ENV,
    ROUNDS,
    Workers,
    _pct,
    runs_finished_at,
    warrant_step_latencies,
    warrant_wait,
)
from bench.loader import load, recreate, template_run, vacuum

__all__ = ["main"]

#: "Flat": loaded within this factor of empty.
TOLERANCE = 0.10
#: Runs of the template's shape whose planner read is timed, per database.
SAMPLES = 20


@dataclasses.dataclass
class Ledger:
    """One database under measurement and what was measured on it."""

    label: str
    url: str
    engine: Any = None
    client: Any = None
    samples: list[str] = dataclasses.field(default_factory=list)
    latency: list[float] = dataclasses.field(default_factory=list)
    throughput: list[float] = dataclasses.field(default_factory=list)
    sweep: list[float] = dataclasses.field(default_factory=list)
    reads: list[float] = dataclasses.field(default_factory=list)


def _runs_in(url: str) -> int:
    import psycopg

    try:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM runs").fetchone()
    except psycopg.Error:
        return 0
    return int(row[0]) if row else 0


def _prepare(args: argparse.Namespace) -> tuple[Ledger, Ledger, Any]:
    """Both databases: the empty one new (with ``SAMPLES`` template runs), the loaded one new
    and loaded unless ``--reuse`` finds it holding ``--runs`` already."""
    from sqlalchemy import text

    from warrant.ledger.db import engine_for

    base = ENV["WARRANT_DATABASE_URL"]
    empty, loaded = Ledger("empty", base + "_empty"), Ledger("loaded", base + "_loaded")
    recreate(empty.url)
    empty.samples = [template_run(empty.url) for _ in range(SAMPLES)]
    report = None
    if args.reuse and _runs_in(loaded.url) >= args.runs:
        print(f"reusing {loaded.url}: {_runs_in(loaded.url):,} runs")
    else:
        recreate(loaded.url)
        report = load(loaded.url, runs=args.runs, batch=args.batch)
        print(
            f"loaded {report.runs:,} runs ({report.steps:,} steps), {report.rows:,} rows in"
            f" {report.seconds:,.1f} s: {report.rows_per_s:,.0f} rows/s,"
            f" {report.runs / report.seconds:,.0f} runs/s"
        )
    print(f"VACUUM ANALYZE: empty {vacuum(empty.url):.1f} s, loaded {vacuum(loaded.url):.1f} s")
    with engine_for(loaded.url).connect() as conn:
        total = conn.execute(text("SELECT count(*) FROM runs")).scalar_one()
        loaded.samples = list(
            conn.execute(
                text("SELECT id FROM runs ORDER BY created_at OFFSET :o LIMIT :n"),
                {"o": total // 2, "n": SAMPLES},
            ).scalars()
        )
    return empty, loaded, report


def _pipeline(ledger: Ledger, app: Any, *, steps: int, runs: int, run_steps: int) -> None:
    """One round of ``python -m bench``'s warrant measures, with workers on ``ledger``."""
    from warrant_demo.scenarios import read_steps

    ENV["WARRANT_DATABASE_URL"] = ledger.url  # the workers' and warrant_step_latencies' ledger
    workers = Workers()
    try:
        workers.start("warrant.broker.app", ["planner"], 1, "planner")
        workers.start("warrant.broker.app", ["policy"], 1, "policy")
        workers.start("warrant.broker.app", ["tool.noop_read"], 1, "tool")
        workers.wait_ready(app, ["planner", "policy", "tool"])
        client = ledger.client
        warrant_wait(client, [client.start_run(read_steps(5))])  # connect the pools once
        run_id = client.start_run(read_steps(steps))
        warrant_wait(client, [run_id])
        ledger.latency += warrant_step_latencies(run_id)
        t0 = time.time()
        rids = [client.start_run(read_steps(run_steps)) for _ in range(runs)]
        warrant_wait(client, rids)
        ledger.throughput.append(runs * run_steps / (runs_finished_at(rids) - t0))
    finally:
        workers.stop()


def _sweep(ledger: Ledger) -> None:
    """The reconciler's sweep, best of 5 (as the integration test times it)."""
    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import sweep

    ctx = context_for(ledger.engine, publisher=RecordingPublisher())
    best = float("inf")
    for _ in range(5):
        report = sweep(ctx)
        if not report.locked or report.republished or report.stale:
            raise RuntimeError(f"sweep on the {ledger.label} ledger found work: {report}")
        best = min(best, report.duration_ms)
    ledger.sweep.append(best)


def _reads(ledger: Ledger, keys: tuple[str, ...], calls: int) -> None:
    """The planner's load query, timed at the engine, over the sample runs in turn."""
    from warrant.ledger.stage_loads import autocommit, load_planning
    from warrant.runner.memory_view import DEFAULT_MAX_ITEMS

    with autocommit(ledger.engine, held=False) as conn:
        for i in range(calls):
            t0 = time.perf_counter()
            row = load_planning(
                conn,
                ledger.samples[i % len(ledger.samples)],
                recent=DEFAULT_MAX_ITEMS * 2,
                memory_keys=keys,
                with_spec=False,
            )
            ledger.reads.append((time.perf_counter() - t0) * 1000)
            if row is None:
                raise RuntimeError(f"no sample run on the {ledger.label} ledger")


def _measure(empty: Ledger, loaded: Ledger, *, rounds: int, quick: bool) -> dict[str, int]:
    from warrant.broker.app import app
    from warrant.broker.context import context_for
    from warrant.broker.publish import Publisher, RecordingPublisher
    from warrant.ledger.db import engine_for
    from warrant.runner.client.api import Client

    sizes = (
        dict(steps=20, runs=10, run_steps=5) if quick else dict(steps=100, runs=50, run_steps=20)
    )
    for ledger in (empty, loaded):
        ledger.engine = engine_for(ledger.url)
        ledger.client = Client(engine=ledger.engine, publisher=Publisher(app))
    keys = context_for(empty.engine, publisher=RecordingPublisher()).tool_deps.memory.allowed_keys
    for i in range(rounds):
        order = (empty, loaded) if i % 2 == 0 else (loaded, empty)
        for ledger in order:
            print(f"round {i + 1}/{rounds}: pipeline on the {ledger.label} ledger", flush=True)
            _pipeline(ledger, app, **sizes)
        for ledger in order:
            _sweep(ledger)
            _reads(ledger, keys, 50 if quick else 200)
    return sizes


def _table(empty: Ledger, loaded: Ledger, sizes: dict[str, int], rounds: int) -> list[str]:
    """Prints the figures; returns the measures that are not flat."""
    from rich.console import Console
    from rich.table import Table

    figures = [
        (f"per-step latency p50, {rounds} x {sizes['steps']} steps (ms)", "latency", 0.5),
        (f"per-step latency p95, {rounds} x {sizes['steps']} steps (ms)", "latency", 0.95),
        (
            f"throughput, {sizes['runs']} runs x {sizes['run_steps']} steps,"
            f" median of {rounds} (steps/s)",
            "throughput",
            None,
        ),
        (f"reconciler sweep, best of 5, median of {rounds} (ms)", "sweep", None),
        (f"planner read p50, {len(empty.reads)} calls (ms)", "reads", 0.5),
        (f"planner read p95, {len(empty.reads)} calls (ms)", "reads", 0.95),
    ]
    table = Table(title=f"empty vs loaded ledger ({loaded.url.rsplit('/', 1)[1]})")
    for column in ("measure", "empty", "loaded", "loaded/empty", "within 10 %"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    grown = []
    for label, attr, q in figures:
        e, lo = (
            (_pct(getattr(x, attr), q) if q else statistics.median(getattr(x, attr)))
            for x in (empty, loaded)
        )
        ratio = lo / e
        worse = ratio < 1 - TOLERANCE if attr == "throughput" else ratio > 1 + TOLERANCE
        if worse:
            grown.append(attr)
        table.add_row(label, f"{e:.2f}", f"{lo:.2f}", f"{ratio:.2f}", "NO" if worse else "yes")
    Console(width=120).print(table)
    print(
        "throughput loaded/empty per round: "
        + " ".join(
            f"{lo / e:.2f}" for e, lo in zip(empty.throughput, loaded.throughput, strict=True)
        )
    )
    return grown


def _bytes_per_step(loaded: Ledger) -> None:
    """``pg_total_relation_size`` of every ledger table (and each of its indexes) over the
    steps the ledger holds (``runs.step``: a run's planner steps, its final answer included)."""
    from rich.console import Console
    from rich.table import Table
    from sqlalchemy import text

    with loaded.engine.connect() as conn:
        steps = conn.execute(text("SELECT sum(step) FROM runs")).scalar_one()
        rows = conn.execute(
            text("""
            SELECT t.relname, i.relname, t.reltuples::bigint, pg_table_size(t.oid),
                   pg_indexes_size(t.oid), pg_total_relation_size(t.oid), pg_relation_size(i.oid)
            FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
            LEFT JOIN pg_index x ON x.indrelid = t.oid LEFT JOIN pg_class i ON i.oid = x.indexrelid
            WHERE n.nspname = 'public' AND t.relkind = 'r' AND t.relname <> 'alembic_version'
            ORDER BY pg_total_relation_size(t.oid) DESC, t.relname, i.relname""")
        ).all()
    table = Table(title=f"bytes per step after the load ({steps:,} steps in runs.step)")
    for column in ("table / index", "rows", "table B/step", "indexes B/step", "total B/step"):
        table.add_column(column, justify="left" if column == "table / index" else "right")
    seen, total = set(), 0
    for name, index, tuples, heap, indexes, whole, isize in rows:
        if name not in seen:
            seen.add(name)
            total += whole
            table.add_row(
                name,
                f"{max(tuples, 0):,}",
                f"{heap / steps:,.0f}",
                f"{indexes / steps:,.0f}",
                f"{whole / steps:,.0f}",
            )
        if index and whole / steps >= 1:
            table.add_row(f"  {index}", "", "", f"{isize / steps:,.0f}", "")
    table.add_row("all", "", "", "", f"{total / steps:,.0f}")
    Console(width=120).print(table)
    print(f"ledger size: {total / 2**20:,.0f} MiB for {steps:,} steps")


def _explain_slowest(ledger: Ledger, action: Any, *, count: int = 2) -> None:
    """Runs ``action`` with every statement on ``ledger.engine`` timed, then prints
    ``EXPLAIN (ANALYZE, BUFFERS)`` of its ``count`` slowest ``SELECT``s."""
    import psycopg
    from sqlalchemy import event

    spent: dict[str, tuple[float, Any]] = {}
    started: list[float] = []

    def before(*_: Any) -> None:
        started.append(time.perf_counter())

    def after(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        took = time.perf_counter() - started.pop()
        select = statement.lstrip().upper().startswith(("SELECT", "WITH"))
        if select and took > spent.get(statement, (0.0, None))[0]:
            spent[statement] = (took, parameters)

    event.listen(ledger.engine, "before_cursor_execute", before)
    event.listen(ledger.engine, "after_cursor_execute", after)
    try:
        action()
    finally:
        event.remove(ledger.engine, "before_cursor_execute", before)
        event.remove(ledger.engine, "after_cursor_execute", after)
    slowest = sorted(spent.items(), key=lambda kv: -kv[1][0])[:count]
    with psycopg.connect(ledger.url) as conn:
        for statement, (took, parameters) in slowest:
            print(f"\n-- {took * 1000:.2f} ms on the {ledger.label} ledger:\n{statement.strip()}")
            plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {statement}", parameters or None)
            print("\n".join(str(r[0]) for r in plan))
            conn.rollback()


def _explain_read(ledger: Ledger, keys: tuple[str, ...]) -> None:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the planner's read of the first sample run, cold
    then warm (the statement runs below SQLAlchemy's events, so it is planned here)."""
    import psycopg

    from warrant.ledger.stage_loads import _PLANNING_SQL, _array_literal
    from warrant.runner.memory_view import DEFAULT_MAX_ITEMS

    sql = "EXPLAIN (ANALYZE, BUFFERS) " + _PLANNING_SQL.replace("{spec}", "NULL::jsonb AS spec")
    params = {
        "run_id": ledger.samples[0],
        "recent": DEFAULT_MAX_ITEMS * 2,
        "keys": _array_literal(keys),
    }
    with psycopg.connect(ledger.url) as conn:
        for attempt in ("first", "again"):
            print(f"\n-- planner read on the {ledger.label} ledger, {attempt}:")
            print("\n".join(str(r[0]) for r in conn.execute(sql, params)))


def _explain_steps(ledger: Ledger, *, count: int = 3) -> None:
    """One 3-step run's statements planned by ``auto_explain`` (as NOTICEs); prints the
    ``count`` with the most buffers read or written outside shared buffers. In a fresh process
    only (a stage's held connection would miss the settings)."""
    import re

    from sqlalchemy import event

    from warrant.ledger.db import autocommit_engine

    plans: list[str] = []

    def on_connect(dbapi: Any, _record: Any) -> None:
        dbapi.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
        with dbapi.cursor() as cur:
            cur.execute("LOAD 'auto_explain'")
            for key, value in (("min_duration", 0), ("analyze", "on"), ("buffers", "on")):
                cur.execute(f"SET auto_explain.log_{key} = '{value}'")
            cur.execute("SET auto_explain.log_level = 'notice'")
        dbapi.commit()

    engines = [ledger.engine] + [
        autocommit_engine(ledger.engine, relaxed=r, held=h)
        for r in (False, True)
        for h in (False, True)
    ]
    for engine in engines:
        event.listen(engine, "connect", on_connect)
    template_run(ledger.url)  # warm: connections, caches
    plans.clear()
    template_run(ledger.url)
    for engine in engines:
        event.remove(engine, "connect", on_connect)

    def outside(plan: str) -> int:
        first = re.search(r"Buffers: ([^\n]*)", plan)
        return sum(int(n) for n in re.findall(r"(?:read|written)=(\d+)", first[1] if first else ""))

    print(
        f"\n== {ledger.label} ledger: {len(plans)} statements, buffers read+written outside"
        f" shared buffers: {sum(outside(p) for p in plans)}"
    )
    for plan in sorted(plans, key=outside, reverse=True)[:count]:
        print(f"\n-- {outside(plan)} buffers read+written:\n{plan}")


def main(argv: list[str] | None = None) -> None:
    """``argv``: this module's options (default: the command line), so ``python -m bench``
    can call it with its own."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000, help="finished runs to load")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--rounds", type=int, help=f"alternating rounds (default {ROUNDS})")
    parser.add_argument("--batch", type=int, default=5000, help="runs per load transaction")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the loaded database if it holds --runs"
    )
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN ANALYZE the sweep's and read's slowest"
    )
    parser.add_argument(
        "--explain-steps",
        action="store_true",
        help="only auto_explain one 3-step run's statements on both existing databases",
    )
    args = parser.parse_args(argv)
    if args.explain_steps:
        from warrant.ledger.db import engine_for

        base = ENV["WARRANT_DATABASE_URL"]
        for label in ("empty", "loaded"):
            ledger = Ledger(label, f"{base}_{label}", engine=engine_for(f"{base}_{label}"))
            _explain_steps(ledger)
            ledger.engine.dispose()
        return
    rounds = args.rounds or (1 if args.quick else ROUNDS)
    import redis

    redis.Redis.from_url(ENV["WARRANT_BROKER_URL"]).flushdb()
    empty, loaded, _ = _prepare(args)
    sizes = _measure(empty, loaded, rounds=rounds, quick=args.quick)
    grown = _table(empty, loaded, sizes, rounds)
    _bytes_per_step(loaded)
    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher

    keys = context_for(empty.engine, publisher=RecordingPublisher()).tool_deps.memory.allowed_keys
    for ledger in (loaded, empty) if args.explain or "sweep" in grown else ():
        _explain_slowest(ledger, lambda x=ledger: _sweep(x))
    for ledger in (loaded, empty) if args.explain or "reads" in grown else ():
        _explain_read(ledger, keys)
    for ledger in (empty, loaded):
        ledger.engine.dispose()


if __name__ == "__main__":
    main()
