"""Benchmark: warrant against a bare Celery pipeline of the same shape, in one run.

    python -m bench [--quick] [--events]

Both use the same Redis and PostgreSQL and the same worker layout (one prefork process per
stage queue), and run side by side in alternating rounds (a drift in the machine's speed
weighs on both alike). With the ``dbos`` package installed (the ``bench`` extra), a third
pipeline of the same shape runs in the same rounds: DBOS durable workflows on a DBOS queue
(``bench.dbos_pipeline``). Prints a table with ratios warrant/baseline (and warrant/DBOS),
tool-bound scaling with 1-8 tool processes, and the memory of worker processes after many
steps; then the ledger's growth (``bench.growth``), real model and tool latencies
(``bench.latency``: N runs at once against a fake model and tool service, warrant vs DBOS) and
the replay of 1,000 recorded runs against the time they took live (``bench.replay``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import os
import platform
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/warrant_bench"
DEFAULT_BROKER = "redis://127.0.0.1:6379/13"
#: Alternating rounds of the side-by-side measures (latency: pooled over rounds; throughput:
#: the median round).
ROUNDS = 4
#: The parts of a full run, in order (``--only`` picks some).
PARTS = ("compare", "memory", "scaling", "parallel", "growth", "latency", "replay")


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "WARRANT_DATABASE_URL": os.environ.get("WARRANT_BENCH_DATABASE_URL", DEFAULT_DB),
        "WARRANT_BROKER_URL": os.environ.get("WARRANT_BENCH_BROKER_URL", DEFAULT_BROKER),
        # the benchmark tools (noop_read, sleep_read) live in the opt-in demo plug-in
        "WARRANT_TOOLS": "warrant_demo:plugin",
    }


ENV = _env()
os.environ.update(
    {k: ENV[k] for k in ("WARRANT_DATABASE_URL", "WARRANT_BROKER_URL", "WARRANT_TOOLS")}
)

from sqlalchemy import text  # noqa: E402
from warrant_demo.scenarios import final, read_steps, spec  # noqa: E402

from bench import dbos_pipeline  # noqa: E402
from warrant.ledger.db import engine_for  # noqa: E402
from warrant.ledger.migrate import upgrade  # noqa: E402
from warrant.runner.stack.roles import celery_worker_command, worker_command  # noqa: E402

LOGS = Path(os.environ.get("WARRANT_BENCH_LOGS", "/tmp/warrant-bench"))


class Workers:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, app: str, queues: list[str], concurrency: int, name: str) -> None:
        """A worker of ``app`` on ``queues``: warrant's roles by the product's own command line
        (:func:`worker_command`: its pool and options), the baseline's as plain Celery's."""
        LOGS.mkdir(parents=True, exist_ok=True)
        out = open(LOGS / f"{name}.log", "ab")  # noqa: SIM115
        if app == "warrant.broker.app":
            role = "tool" if queues[0].startswith("tool.") else queues[0]
            tools = [q.removeprefix("tool.") for q in queues] if role == "tool" else None
            command = worker_command(
                role, tools=tools, concurrency=concurrency, name=f"{name}@%h", events=False
            )
        else:
            command = celery_worker_command(
                app, queues, node=f"{name}@%h", concurrency=concurrency, events=False
            )
        self.procs.append(
            subprocess.Popen(
                command,
                env=ENV,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        )

    def wait_ready(self, app_obj: Any, names: list[str], timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            seen = {n.split("@")[0] for r in (app_obj.control.ping(timeout=0.5) or []) for n in r}
            if set(names) <= seen:
                return
        raise TimeoutError(f"workers {names} not ready")

    def rss_mb(self) -> list[float]:
        import psutil

        out = []
        for p in self.procs:
            main = psutil.Process(p.pid)
            # the processes that run tasks: the pool's children, or a solo worker itself
            for proc in main.children(recursive=True) or [main]:
                out.append(proc.memory_info().rss / 2**20)
        return out

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()


class CpuMeter:
    """CPU time by process group (stage workers, PostgreSQL, Redis, this client) over measured
    spans, per pipeline: where each pipeline's steps spend the machine."""

    GROUPS = ("stage workers", "postgres", "redis", "bench client")

    def __init__(self) -> None:
        self.spent: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.steps: collections.Counter[str] = collections.Counter()
        self.counted: dict[str, dict[str, float]] = collections.defaultdict(dict)
        """The servers' work per pipeline (:func:`bench.latency_meter.server_counters`)."""

    @staticmethod
    def _group(proc: Any) -> str | None:
        if proc.pid == os.getpid():
            return "bench client"
        name = proc.info["name"] or ""
        if "postgres" in name:
            return "postgres"
        if "redis" in name:
            return "redis"
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "celery" in cmdline or dbos_pipeline.WORKER_MODULE in cmdline:
            return "stage workers"
        return None

    def _snapshot(self) -> dict[int, tuple[str, float]]:
        import psutil

        out = {}
        for proc in psutil.process_iter(["name", "cmdline"]):
            try:
                group = self._group(proc)
                if group:
                    t = proc.cpu_times()
                    out[proc.pid] = (group, t.user + t.system)
            except psutil.Error:
                continue
        return out

    @contextlib.contextmanager
    def measure(self, pipeline: str, steps: int) -> Iterator[None]:
        counted = _counters(dbos=pipeline == "dbos")
        before = self._snapshot()
        yield
        for pid, (group, spent) in self._snapshot().items():
            self.spent[pipeline][group] += spent - before.get(pid, (group, 0.0))[1]
        self.steps[pipeline] += steps
        for key, value in _counters(dbos=pipeline == "dbos", settle=True).items():
            spent_here = self.counted[pipeline]
            spent_here[key] = spent_here.get(key, 0.0) + value - counted.get(key, value)

    def per_step_ms(self, pipeline: str, group: str) -> float:
        return self.spent[pipeline][group] / max(1, self.steps[pipeline]) * 1000

    def per_step(self, pipeline: str, counter: str) -> float | None:
        """A server counter per step (None when the server does not count it)."""
        if counter not in self.counted[pipeline]:
            return None
        return self.counted[pipeline][counter] / max(1, self.steps[pipeline])


def _counters(*, dbos: bool, settle: bool = False) -> dict[str, float]:
    """PostgreSQL transactions and statements in the bench's database (and, for DBOS, its
    system database: its idle worker polls its queue there, which is no other pipeline's
    cost), Redis commands."""
    from bench.latency_meter import server_counters

    url = ENV["WARRANT_DATABASE_URL"]
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    databases = [name, f"{name}_dbos"] if dbos else [name]
    return server_counters(admin, databases, ENV["WARRANT_BROKER_URL"], settle=settle)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


# --- baseline --------------------------------------------------------------------------------


def baseline_run(run_id: str, steps: int) -> None:
    from bench.baseline import app

    app.send_task("bench.planner", kwargs={"run_id": run_id, "step": 1, "total": steps})


def baseline_wait(run_ids: list[str], timeout: float = 600) -> None:
    engine = engine_for(ENV["WARRANT_DATABASE_URL"])
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with engine.connect() as conn:
            done = conn.execute(
                text("SELECT count(*) FROM bench_rows WHERE stage='done' AND run_id = ANY(:r)"),
                {"r": run_ids},
            ).scalar_one()
        if done >= len(run_ids):
            return
        time.sleep(0.05)
    raise TimeoutError("baseline runs did not finish")


def baseline_step_latencies(run_id: str) -> list[float]:
    with engine_for(ENV["WARRANT_DATABASE_URL"]).connect() as conn:
        rows = (
            conn.execute(
                text(
                    "SELECT at FROM bench_rows WHERE run_id=:r AND stage IN ('planner','done') "
                    "ORDER BY step"
                ),
                {"r": run_id},
            )
            .scalars()
            .all()
        )
    return [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(rows)]


def rows_done_at(run_ids: list[str]) -> float:
    """When the last of the baseline's (or DBOS's) runs wrote its ``done`` row (epoch seconds,
    the database's clock: the same host's). Throughput ends there for every pipeline, not
    when a poller noticed (warrant's client polls with a growing pause, up to 250 ms)."""
    with engine_for(ENV["WARRANT_DATABASE_URL"]).connect() as conn:
        return float(
            conn.execute(
                text(
                    "SELECT extract(epoch FROM max(at)) FROM bench_rows"
                    " WHERE stage = 'done' AND run_id = ANY(:r)"
                ),
                {"r": run_ids},
            ).scalar_one()
        )


# --- warrant ---------------------------------------------------------------------------------


def runs_finished_at(run_ids: list[str]) -> float:
    """When the last of warrant's runs finished (``runs.finished_at``, epoch seconds)."""
    with engine_for(ENV["WARRANT_DATABASE_URL"]).connect() as conn:
        return float(
            conn.execute(
                text("SELECT extract(epoch FROM max(finished_at)) FROM runs WHERE id = ANY(:r)"),
                {"r": run_ids},
            ).scalar_one()
        )


def warrant_step_latencies(run_id: str) -> list[float]:
    with engine_for(ENV["WARRANT_DATABASE_URL"]).connect() as conn:
        rows = (
            conn.execute(
                text(
                    "SELECT created_at FROM trace_events WHERE run_id=:r "
                    "AND event='proposal.received' "
                    "ORDER BY seq"
                ),
                {"r": run_id},
            )
            .scalars()
            .all()
        )
    return [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(rows)]


def warrant_wait(client: Any, run_ids: list[str], timeout: float = 600) -> None:
    for run_id in run_ids:
        info = client.wait(run_id, timeout=timeout)
        if info.status != "completed":
            raise RuntimeError(f"bench run {run_id} ended {info.status} {info.stop_reason}")


# --- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument(
        "--events",
        action="store_true",
        help="both pipelines send Celery task events (as `warrant worker -E` does for Flower);"
        " default: neither, as bare Celery",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=PARTS,
        help="run only this part (repeatable); default: all of " + ", ".join(PARTS),
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help=f"side-by-side rounds (default {ROUNDS})"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="also write the side-by-side figures as JSON to this file (bench.series reads it)",
    )
    parser.add_argument(
        "--latency-json", type=Path, default=None, help="write the latency part's figures here"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="latency part: py-spy the planner and tool workers during the largest N's run,"
        " files into this folder (pip install py-spy)",
    )
    args = parser.parse_args()
    parts = set(args.only or PARTS)
    events = "1" if args.events else "0"
    ENV["WARRANT_TASK_EVENTS"] = ENV["BENCH_TASK_EVENTS"] = events
    os.environ["WARRANT_TASK_EVENTS"] = os.environ["BENCH_TASK_EVENTS"] = events
    steps, runs, run_steps, calls, mem_steps, rounds = (
        (20, 10, 5, 40, 1000, 1) if args.quick else (100, 50, 20, 200, 10_000, ROUNDS)
    )
    rounds = args.rounds or rounds

    import psycopg
    from rich.console import Console

    console = Console()
    admin = ENV["WARRANT_DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    dbname = ENV["WARRANT_DATABASE_URL"].rsplit("/", 1)[1]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    upgrade(ENV["WARRANT_DATABASE_URL"])
    import redis as redis_lib

    redis_lib.Redis.from_url(ENV["WARRANT_BROKER_URL"]).flushdb()

    from bench import baseline
    from warrant.broker.app import app as warrant_app
    from warrant.broker.publish import Publisher
    from warrant.runner.client.api import Client

    with engine_for(ENV["WARRANT_DATABASE_URL"]).begin() as conn:
        conn.execute(text(baseline.SCHEMA))
    client = Client(
        engine=engine_for(ENV["WARRANT_DATABASE_URL"]), publisher=Publisher(warrant_app)
    )
    results = cpu = dbos_skipped = None
    if "compare" in parts:
        results, cpu, dbos_skipped = _compare(console, client, (rounds, steps, runs, run_steps))
        _print_comparison(
            console,
            results,
            cpu,
            title=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores,"
            f" Python {platform.python_version()}, task events {'on' if args.events else 'off'}",
            sizes=(rounds, steps, runs, run_steps),
            dbos_skipped=dbos_skipped,
        )
        if args.results is not None:
            _write_results(args.results, results, cpu, events=args.events, rounds=rounds)
    if "memory" in parts:
        _memory(console, client, mem_steps)
    if "scaling" in parts:
        _scaling(console, client, calls)
    if "parallel" in parts:
        _parallel(console, client, 2 if args.quick else 5)
    if "growth" in parts:
        from bench import growth

        runs_loaded = os.environ.get(
            "WARRANT_BENCH_GROWTH_RUNS", "10000" if args.quick else "100000"
        )
        growth.main(["--runs", runs_loaded, *(["--quick"] if args.quick else [])])
    if "latency" in parts:
        from bench import latency

        latency.main(
            [
                *(["--quick"] if args.quick else []),
                *(["--events"] if args.events else []),
                *(["--json", str(args.latency_json)] if args.latency_json else []),
                *(["--profile", str(args.profile)] if args.profile else []),
            ]
        )
    if "replay" in parts:
        from bench import replay

        replay.main(["--quick"] if args.quick else [])


def _compare(console: Any, client: Any, sizes: tuple[int, int, int, int]) -> tuple[Any, Any, Any]:
    """Baseline, warrant and DBOS side by side in alternating rounds."""
    from bench import baseline
    from warrant.broker.app import app as warrant_app

    rounds, steps, runs, run_steps = sizes
    # 1. both pipelines side by side, in alternating rounds: this machine's speed drifts (a
    # shared VM), and a drift then weighs on both the same.
    w = Workers()
    for q in baseline.QUEUES:
        w.start("bench.baseline", [q], 1, q.replace(".", "-"))
    w.start("warrant.broker.app", ["planner"], 1, "planner")
    w.start("warrant.broker.app", ["policy"], 1, "policy")
    w.start("warrant.broker.app", ["tool.noop_read"], 1, "tool")
    w.wait_ready(baseline.app, [q.replace(".", "-") for q in baseline.QUEUES])
    w.wait_ready(warrant_app, ["planner", "policy", "tool"])
    warrant_wait(client, [client.start_run(read_steps(5))])  # connect the pools once
    baseline_run("b-warm", 5)
    baseline_wait(["b-warm"])
    dbos_skipped = dbos_pipeline.missing()
    dbos = None if dbos_skipped else dbos_pipeline.DbosPipeline(ENV, LOGS)
    if dbos is not None:
        with console.status("DBOS: system database, worker, queue"):
            try:
                dbos.start()
                dbos.run("d-warm", 5)
                baseline_wait(["d-warm"])
            except BaseException:
                dbos.stop()
                w.stop()
                raise
    lat: dict[str, list[float]] = {"base": [], "warrant": [], "dbos": []}
    tput: dict[str, list[float]] = {"base": [], "warrant": [], "dbos": []}
    cpu = CpuMeter()

    def base_latency() -> None:
        rid = f"b-{uuid.uuid4().hex[:8]}"
        baseline_run(rid, steps)
        baseline_wait([rid])
        lat["base"] += baseline_step_latencies(rid)

    def warrant_latency() -> None:
        rid = client.start_run(read_steps(steps))
        warrant_wait(client, [rid])
        lat["warrant"] += warrant_step_latencies(rid)

    def base_throughput() -> None:
        rids = [f"b-{uuid.uuid4().hex[:8]}" for _ in range(runs)]
        with cpu.measure("base", runs * run_steps):
            t0 = time.time()
            for r in rids:
                baseline_run(r, run_steps)
            baseline_wait(rids)
            tput["base"].append(runs * run_steps / (rows_done_at(rids) - t0))

    def warrant_throughput() -> None:
        with cpu.measure("warrant", runs * run_steps):
            t0 = time.time()
            rids = [client.start_run(read_steps(run_steps)) for _ in range(runs)]
            warrant_wait(client, rids)
            tput["warrant"].append(runs * run_steps / (runs_finished_at(rids) - t0))

    def dbos_latency() -> None:
        assert dbos is not None
        rid = f"d-{uuid.uuid4().hex[:8]}"
        dbos.run(rid, steps)
        baseline_wait([rid])  # the same rows as the baseline's, read the same way
        lat["dbos"] += baseline_step_latencies(rid)

    def dbos_throughput() -> None:
        assert dbos is not None
        rids = [f"d-{uuid.uuid4().hex[:8]}" for _ in range(runs)]
        with cpu.measure("dbos", runs * run_steps):
            t0 = time.time()
            for r in rids:
                dbos.run(r, run_steps)
            baseline_wait(rids)
            tput["dbos"].append(runs * run_steps / (rows_done_at(rids) - t0))

    pipelines = [(base_latency, base_throughput), (warrant_latency, warrant_throughput)]
    if dbos is not None:
        pipelines.append((dbos_latency, dbos_throughput))
    for i in range(rounds):
        # ABBA, extended to three: rotate the order every other round and reverse it in the
        # rounds between, so no pipeline always goes first or last.
        shift = (i // 2) % len(pipelines)
        order = pipelines[shift:] + pipelines[:shift]
        if i % 2:
            order.reverse()
        with console.status(f"round {i + 1}/{rounds}: latency and throughput, all pipelines"):
            for measure in [lat_m for lat_m, _ in order] + [tput_m for _, tput_m in order]:
                measure()
    results: dict[str, Any] = {
        "base_p50": _pct(lat["base"], 0.5),
        "base_p95": _pct(lat["base"], 0.95),
        "w_p50": _pct(lat["warrant"], 0.5),
        "w_p95": _pct(lat["warrant"], 0.95),
        "base_tput": statistics.median(tput["base"]),
        "w_tput": statistics.median(tput["warrant"]),
        "tput_ratios": [wv / b for b, wv in zip(tput["base"], tput["warrant"], strict=True)],
    }
    if dbos is not None:
        results |= {
            "d_p50": _pct(lat["dbos"], 0.5),
            "d_p95": _pct(lat["dbos"], 0.95),
            "d_tput": statistics.median(tput["dbos"]),
            "d_tput_ratios": [wv / d for d, wv in zip(tput["dbos"], tput["warrant"], strict=True)],
        }
        dbos.stop()
    w.stop()

    return results, cpu, dbos_skipped


def _memory(console: Any, client: Any, mem_steps: int) -> None:
    """RSS of warrant's pool processes over many steps."""
    from warrant.broker.app import app as warrant_app

    # 2. memory of warrant's worker processes over many steps
    w = Workers()
    w.start("warrant.broker.app", ["planner"], 1, "planner")
    w.start("warrant.broker.app", ["policy"], 1, "policy")
    w.start("warrant.broker.app", ["tool.noop_read"], 1, "tool")
    w.wait_ready(warrant_app, ["planner", "policy", "tool"])
    with console.status(f"warrant: memory over {mem_steps} steps"):
        rss_start = w.rss_mb()
        done = 0
        rss_mid: list[float] = []
        while done < mem_steps:
            batch = [client.start_run(read_steps(100)) for _ in range(10)]
            warrant_wait(client, batch)
            done += 1000
            if not rss_mid and done >= mem_steps // 10:
                rss_mid = w.rss_mb()
        rss_end = w.rss_mb()
    w.stop()
    console.print(
        "memory of warrant's task-running processes (RSS MB; planner/policy/tool): "
        f"start {_fmt(rss_start)}, "
        f"after {mem_steps // 10} steps {_fmt(rss_mid)}, after {mem_steps} steps {_fmt(rss_end)}"
    )


def _scaling(console: Any, client: Any, calls: int) -> None:
    """Tool-bound throughput with 1-8 tool processes."""
    from rich.table import Table

    from warrant.broker.app import app as warrant_app

    # 3. tool-bound scaling
    scaling: dict[int, float] = {}
    for n in (1, 2, 4, 8):
        w = Workers()
        w.start("warrant.broker.app", ["planner"], 2, "planner")
        w.start("warrant.broker.app", ["policy"], 2, "policy")
        w.start("warrant.broker.app", ["tool.sleep_read"], n, "tool")
        w.wait_ready(warrant_app, ["planner", "policy", "tool"])
        with console.status(f"tool-bound: {calls} calls x 100 ms, {n} tool processes"):
            per_run = 5
            t0 = time.perf_counter()
            rids = [
                client.start_run(read_steps(per_run, tool="sleep_read", ms=100))
                for _ in range(calls // per_run)
            ]
            warrant_wait(client, rids)
            scaling[n] = calls / (time.perf_counter() - t0)
        w.stop()
    scale = Table(title=f"tool-bound: {calls} calls of a 100 ms tool")
    scale.add_column("tool processes", justify="right")
    scale.add_column("calls/s", justify="right")
    scale.add_column("speed-up vs 1", justify="right")
    for n, v in scaling.items():
        scale.add_row(str(n), f"{v:.1f}", f"{v / scaling[1]:.2f}")
    console.print(scale)


def _reads(calls: int, ms: int, *, parallel: bool) -> dict[str, Any]:
    """A run of ``calls`` reads of ``ms`` milliseconds each (``wait_read``: one wait the
    worker can interrupt), as one parallel step or as one step each, then a final answer."""
    reads: list[dict[str, Any]] = [
        {
            "kind": "tool",
            "proposal_id": f"r{n}",
            "tool": "wait_read",
            "tool_version": "1",
            "arguments": {"n": n, "ms": ms},
        }
        for n in range(1, calls + 1)
    ]
    outputs: list[dict[str, Any]] = reads
    if parallel:
        outputs = [{"kind": "parallel", "proposal_id": "reads", "calls": reads}]
        cited = [f"tool-1.{n}" for n in range(1, calls + 1)]
    else:
        cited = [f"tool-{n}" for n in range(1, calls + 1)]
    return spec(
        [*outputs, final("done", *cited)],
        grants=[{"capability": "bench:read"}],
        max_steps=calls + 1,
        max_tool_calls=calls,
        deadline_s=600,
    )


def _parallel(console: Any, client: Any, runs: int) -> None:
    """Three 1 s reads per run (issue 49): one parallel step against three steps, each run's
    wall time from its creation to its end on the ledger's clock, median of ``runs``."""
    from rich.table import Table

    from warrant.broker.app import app as warrant_app

    w = Workers()
    w.start("warrant.broker.app", ["planner"], 2, "planner")
    w.start("warrant.broker.app", ["policy"], 2, "policy")
    w.start("warrant.broker.app", ["tool.wait_read"], 4, "tool")
    w.wait_ready(warrant_app, ["planner", "policy", "tool"])
    walls: dict[str, list[float]] = {}
    try:
        for shape in ("three steps", "one parallel step"):
            with console.status(f"3 reads of 1 s per run, {shape}, {runs} runs"):
                for _ in range(runs):
                    run_id = client.start_run(_reads(3, 1000, parallel=shape != "three steps"))
                    warrant_wait(client, [run_id])
                    info = client.get_run(run_id)
                    walls.setdefault(shape, []).append(_wall_s(run_id))
                    assert info.status == "completed"
    finally:
        w.stop()
    table = Table(title=f"3 reads of 1 s per run, median of {runs} runs")
    table.add_column("shape")
    table.add_column("wall time per run (s)", justify="right")
    table.add_column("vs three steps", justify="right")
    base = statistics.median(walls["three steps"])
    for shape, values in walls.items():
        median = statistics.median(values)
        table.add_row(shape, f"{median:.2f}", f"{median / base:.2f}")
    console.print(table)


def _wall_s(run_id: str) -> float:
    """A run's wall time, creation to end, on the database's clock."""
    with engine_for(ENV["WARRANT_DATABASE_URL"]).connect() as conn:
        took = conn.execute(
            text("SELECT extract(epoch FROM finished_at - created_at) FROM runs WHERE id = :id"),
            {"id": run_id},
        ).scalar_one()
    return float(took)


def _print_comparison(
    console: Any,
    results: dict[str, Any],
    cpu: CpuMeter,
    *,
    title: str,
    sizes: tuple[int, int, int, int],
    dbos_skipped: str | None,
) -> None:
    """The side-by-side table (and where the CPU went), with the DBOS columns when it ran."""
    from rich.table import Table

    rounds, steps, runs, run_steps = sizes
    with_dbos = dbos_skipped is None
    table = Table(
        title=f"warrant vs bare Celery{' and DBOS ' + dbos_pipeline.version() if with_dbos else ''}"
        f" — {title}"
    )
    table.add_column("measure")
    for name in ("baseline", "warrant", *(("DBOS",) if with_dbos else ())):
        table.add_column(name, justify="right")
    table.add_column("warrant/baseline", justify="right")
    if with_dbos:
        table.add_column("warrant/DBOS", justify="right")
    lat = f"{rounds} x 1 run x {steps} steps (ms)"
    tput = (
        f"throughput, {runs} runs x {run_steps} steps, median of {rounds} (steps/s;"
        " ratio: median of the rounds' ratios)"
    )
    for label, key, ratio_key in (
        (f"per-step latency p50, {lat}", "p50", None),
        (f"per-step latency p95, {lat}", "p95", None),
        (tput, "tput", "tput_ratios"),
    ):
        b, wv = results[f"base_{key}"], results[f"w_{key}"]
        cells = [f"{b:.1f}", f"{wv:.1f}"]
        ratios = [
            statistics.median(results[ratio_key]) if ratio_key else wv / b,
        ]
        if with_dbos:
            d = results[f"d_{key}"]
            cells.append(f"{d:.1f}")
            ratios.append(statistics.median(results[f"d_{ratio_key}"]) if ratio_key else wv / d)
        table.add_row(label, *cells, *(f"{r:.2f}" for r in ratios))
    console.print(table)
    console.print(
        "throughput ratio per round (each round's pipelines ran a minute apart at most): "
        + " ".join(f"{r:.2f}" for r in results["tput_ratios"])
        + (
            "; warrant/DBOS: " + " ".join(f"{r:.2f}" for r in results["d_tput_ratios"])
            if with_dbos
            else ""
        )
    )
    if not with_dbos:
        console.print(f"DBOS column skipped: {dbos_skipped}", markup=False)
    pipelines = {"baseline": "base", "warrant": "warrant"} | ({"DBOS": "dbos"} if with_dbos else {})
    where = Table(title="CPU per step in the throughput rounds (ms; 2 cores shared by all)")
    where.add_column("process group")
    for name in pipelines:
        where.add_column(name, justify="right")
    where.add_column("warrant - baseline", justify="right")
    if with_dbos:
        where.add_column("warrant - DBOS", justify="right")
    for group in (*CpuMeter.GROUPS, "all"):
        groups = CpuMeter.GROUPS if group == "all" else (group,)
        ms = {n: sum(cpu.per_step_ms(key, g) for g in groups) for n, key in pipelines.items()}
        diffs = [ms["warrant"] - ms["baseline"]]
        if with_dbos:
            diffs.append(ms["warrant"] - ms["DBOS"])
        where.add_row(group, *(f"{v:.2f}" for v in ms.values()), *(f"{d:+.2f}" for d in diffs))
    for counter, label in _COUNTERS.items():
        per = {n: cpu.per_step(key, counter) for n, key in pipelines.items()}
        cells = ["-" if v is None else f"{v:.1f}" for v in per.values()]
        where.add_row(label, *cells)
    console.print(where)


#: The server counters shown per step beside the CPU (the Redis server's are all its clients').
_COUNTERS = {
    "pg_commits": "PostgreSQL commits per step",
    "pg_statements": "PostgreSQL statements per step",
    "pg_sessions": "PostgreSQL connections opened per step",
    "redis_commands": "Redis commands per step (server-wide)",
}


def _write_results(
    path: Path, results: dict[str, Any], cpu: CpuMeter, *, events: bool, rounds: int
) -> None:
    """The comparison's figures and the CPU per step of each pipeline's process groups."""
    import json

    pipelines = ("base", "warrant", *(("dbos",) if "d_p50" in results else ()))
    cpu_ms = {p: {g: cpu.per_step_ms(p, g) for g in CpuMeter.GROUPS} for p in pipelines}
    counted = {p: {c: cpu.per_step(p, c) for c in _COUNTERS} for p in pipelines}
    record = {
        "events": events,
        "rounds": rounds,
        **results,
        "cpu_ms_per_step": cpu_ms,
        "server_counts_per_step": counted,
    }
    path.write_text(json.dumps(record, indent=1))


def _fmt(values: list[float]) -> str:
    return "/".join(f"{v:.0f}" for v in values) if values else "-"


if __name__ == "__main__":
    main()
