"""Where a step's time goes: the three stages driven in-process, without a broker.

    python -m bench.profile [--runs N] [--steps N] [--sql] [--cprofile]

Runs ``--runs`` fixture runs of ``--steps`` no-op read steps, interleaved (their messages
are handled in the order they were sent), by calling the planner, policy and tool stages
directly (a recording publisher stands in for Celery), and prints per stage: in-process time
per call, time spent in SQL statements and statements per call (a statement outside a
transaction block is one round trip; BEGIN/COMMIT are not counted), and, when PostgreSQL runs
on this machine, its server's CPU per step. With ``--cprofile``, the 40 most expensive
functions too. Uses the benchmark's database (``WARRANT_BENCH_DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import time
from typing import Any

from warrant_demo.scenarios import read_steps

from bench.__main__ import ENV

__all__ = ["main"]


class Counter:
    """Counts statements and their time at the driver (psycopg), per stage."""

    def __init__(self) -> None:
        import psycopg

        self.stage = "setup"
        self.statements: collections.Counter[str] = collections.Counter()
        self.sql_time: collections.Counter[str] = collections.Counter()
        self.sql_count: collections.Counter[str] = collections.Counter()
        self.sql_stage: collections.Counter[str] = collections.Counter()
        execute = psycopg.Cursor.execute
        counter = self

        def timed(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return execute(cursor, query, *args, **kwargs)
            finally:
                counter.record(str(query), time.perf_counter() - t0)

        psycopg.Cursor.execute = timed  # type: ignore[method-assign]

    def record(self, statement: str, spent: float) -> None:
        self.statements[self.stage] += 1
        key = f"{self.stage}: {' '.join(statement.split())[:110]}"
        self.sql_time[key] += spent
        self.sql_count[key] += 1
        self.sql_stage[self.stage] += spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200, help="steps per run")
    parser.add_argument("--runs", type=int, default=1, help="runs, one after the other")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--sql", action="store_true", help="the slowest statements too")
    args = parser.parse_args()
    os.environ["WARRANT_TOOLS"] = "warrant_demo:plugin"  # noop_read is a demo tool

    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.broker.policy.stage import policy_evaluate
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.tool.stage import tool_execute
    from warrant.ledger.db import engine_for
    from warrant.ledger.migrate import upgrade
    from warrant.runner.client.api import Client

    url = ENV["WARRANT_DATABASE_URL"]
    upgrade(url)
    engine = engine_for(url)
    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher)
    counter = Counter()
    client = Client(engine=engine, publisher=publisher)  # type: ignore[arg-type]
    server = _server_processes(engine)
    cpu_before = _cpu(server)
    run_ids = [client.start_run(read_steps(args.steps)) for _ in range(args.runs)]
    stages = {
        "planner": lambda m: planner_step(ctx, m["run_id"], m["version"]),
        "policy": lambda m: policy_evaluate(ctx, m["run_id"], m["version"]),
        "tool": lambda m: tool_execute(
            ctx, m["run_id"], m["version"], m["command_id"], tool=m["tool"]
        ),
    }
    elapsed: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    profiler = cProfile.Profile() if args.cprofile else None
    if profiler:
        profiler.enable()
    while publisher.sent:
        stage, message = publisher.sent.pop(0)
        counter.stage = stage
        t0 = time.perf_counter()
        stages[stage](message)
        elapsed[stage] += time.perf_counter() - t0
        calls[stage] += 1
    if profiler:
        profiler.disable()
    server_ms = (_cpu(server) - cpu_before) * 1000
    statuses = collections.Counter(client.get_run(r).status for r in run_ids)
    print(
        f"{args.runs} run(s) of {args.steps} steps: {dict(statuses)},"
        f" {calls['planner']} planner calls ({os.cpu_count()} cores)"
    )
    print(f"{'stage':<8} {'ms/call':>8} {'in SQL':>7} {'statements':>11}")
    total = 0.0
    for stage in stages:
        n = max(1, calls[stage])
        ms = elapsed[stage] / n * 1000
        total += ms
        print(
            f"{stage:<8} {ms:>8.2f} {counter.sql_stage[stage] / n * 1000:>7.2f}"
            f" {counter.statements[stage] / n:>11.1f}"
        )
    print(f"{'step':<8} {total:>8.2f}")
    if server:
        steps = max(1, calls["tool"])
        print(f"PostgreSQL server CPU per step (all its processes): {server_ms / steps:.2f} ms")
    if args.sql:
        for key, spent in counter.sql_time.most_common(15):
            n = counter.sql_count[key]
            print(f"{spent / n * 1000:7.2f} ms x {n:<5} {key}")
    if profiler:
        stats = pstats.Stats(profiler).sort_stats(os.environ.get("PROFILE_SORT", "cumulative"))
        stats.print_stats(os.environ.get("PROFILE_FILTER", ""), 40)


def _server_processes(engine: Any) -> list[Any]:
    """The PostgreSQL server's processes when it runs on this machine (else none)."""
    import psutil
    from sqlalchemy import text

    with engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    try:
        postmaster = psutil.Process(pid).parent()
    except psutil.Error:
        return []
    return [postmaster] if postmaster is not None else []


def _cpu(server: list[Any]) -> float:
    """CPU seconds of the server: the postmaster and all its children, live ones (the
    connections' backends persist across the measure, so none is lost)."""
    import psutil

    total = 0.0
    for root in server:
        for proc in [root, *root.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
    return total


if __name__ == "__main__":
    main()
