"""Real model and tool latencies (issue 31): N agent runs started at once, each three model
calls to a fake OpenAI-compatible server and two calls of a read tool that makes a real HTTP
call to a fake tool service (both real servers on loopback, :mod:`bench.fakes`).

    python -m bench.latency [--quick] [--sizes 100,1000] [--model-s 1.0] [--tool-s 0.5]
                            [--json FILE] [--profile DIR]
    python -m bench --only latency            (the same part of ``make bench``)

"At once": the N runs are started with the fake model's gate closed (:mod:`bench.fakes`), the
bench waits until all of them wait on their first model call, then opens it; the wall time
runs from there to the last run's end, so the client's own start rate (one process, reported
as ``start s``) does not pace the runs.

A **step** is one planner step: one model call and what follows it (the policy's decision and
the tool call it proposed, or the run's completion); a run is three steps. Per run size N and
latency profile (zero, fixed, long-tailed: lognormal with the same median and a p99 five times
it), for warrant and for DBOS (:mod:`bench.dbos_worker`'s agent workflow on a DBOS queue, the
same fakes over HTTP, the same PostgreSQL server): wall time (gate open to last finish, the
database's clock), runs/s, steps/s, steps/s over the zero-latency steps/s of the same run, the
most model and tool calls in flight (counted by the fake servers), the RSS of every worker
process (idle before, peak during) and the peak PostgreSQL connections.

warrant's workers are started by the product's own command lines (:func:`worker_command`:
each role's pool, threads for the planner); their sizes come from the environment:
``WARRANT_BENCH_PLANNER_CONCURRENCY`` (threads per planner process, default the product's
``WARRANT_PLANNER_CONCURRENCY``), ``WARRANT_BENCH_PLANNER_PROCESSES`` (1),
``WARRANT_BENCH_TOOL_CONCURRENCY`` (default ``WARRANT_TOOL_CONCURRENCY``),
``WARRANT_BENCH_POLICY_CONCURRENCY`` (1), and DBOS's
``WARRANT_BENCH_DBOS_AGENT_CONCURRENCY`` (1024 workflows at once).

``--profile DIR``: during the largest N's fixed-latency run of warrant, ``py-spy`` records the
planner and tool workers (``pip install py-spy``; flame graphs and a ``dump`` of every thread
into DIR).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.__main__ import ENV, LOGS, Workers, baseline_wait, rows_done_at, runs_finished_at
from bench.fakes import TOOL_CALLS, FakeService, Latency
from bench.latency_meter import Meter, snapshot
from bench.latency_report import print_results, write_json

__all__ = ["main"]

#: Steps per run: one per model call.
STEPS = TOOL_CALLS + 1
#: Runs are started by this many client threads (the client's pool holds 10 connections).
STARTERS = 8
#: How often the meter samples RSS and connections (seconds).
SAMPLE_S = 0.25
#: No more first model calls arriving at the gate for this long: the pipeline holds no more
#: runs at once, and the gate opens with the ones it holds.
SATURATED_S = 3.0
#: ``--profile``: when the ``py-spy dump`` of every thread is taken, after the first start.
DUMP_AFTER_S = 3.0
#: ``--profile``: py-spy's samples per second (its cost grows with the threads it walks: at
#: 50 Hz it fell a minute behind on a 1024-thread planner; the profile perturbs the measure).
SPY_HZ = int(os.environ.get("WARRANT_BENCH_SPY_HZ", "5"))


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    model: Latency
    tool: Latency


def profiles(model_s: float, tool_s: float) -> list[Profile]:
    """Zero latency first (the baseline of the ratios), then fixed, then long-tailed."""
    return [
        Profile("zero", Latency("fixed", 0.0), Latency("fixed", 0.0)),
        Profile("fixed", Latency("fixed", model_s), Latency("fixed", tool_s)),
        Profile("long-tail", Latency("lognormal", model_s), Latency("lognormal", tool_s)),
    ]


def _int_env(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


@dataclasses.dataclass
class Fakes:
    model: FakeService
    tool: FakeService

    def configure(self, profile: Profile, *, hold: bool = False) -> None:
        """``hold``: the model's gate closed (model calls wait until it opens)."""
        self.model.configure(profile.model, hold=hold)
        self.tool.configure(profile.tool)

    def stop(self) -> None:
        self.model.stop()
        self.tool.stop()


def agent_spec(model_root: str) -> dict[str, Any]:
    """A run of the OpenAI planner kind against the fake model (which proposes ``http_read``
    twice, then ``final``)."""
    return {
        "goal": "Read two records, then answer.",
        "subject": "bench-user",
        "planner": {
            "kind": "openai",
            "model": "bench",
            "base_url": f"{model_root}/v1",
            "temperature": 0,
            "timeout_s": 30,
            "max_retries": 2,
        },
        "grants": [{"capability": "bench:read"}],
        "budgets": {
            "max_steps": STEPS,
            "max_model_calls": STEPS + 3,
            "max_tool_calls": TOOL_CALLS,
            "deadline_s": 3600,
        },
    }


# --- warrant ---------------------------------------------------------------------------------


@dataclasses.dataclass
class WarrantStack:
    """warrant's workers for one session, by role, as ``worker_command`` starts them."""

    workers: Workers
    roles: dict[str, list[int]]
    pools: dict[str, str]


def _pool_of(role: str, concurrency: int) -> str:
    from warrant.runner.stack.roles import worker_command

    command = worker_command(
        role, tools=["http_read"] if role == "tool" else None, concurrency=concurrency
    )
    return f"{command[command.index('-P') + 1]} x{concurrency}"


def start_warrant() -> WarrantStack:
    from warrant.broker.app import app as warrant_app
    from warrant.runner.stack.roles import role_concurrency

    # the default deployment's sizes unless told otherwise
    sizes = {
        "planner": _int_env("WARRANT_BENCH_PLANNER_CONCURRENCY", role_concurrency("planner", None)),
        "policy": _int_env("WARRANT_BENCH_POLICY_CONCURRENCY", 1),
        "tool": _int_env("WARRANT_BENCH_TOOL_CONCURRENCY", role_concurrency("tool", None)),
    }
    w = Workers()
    names: dict[str, list[str]] = {"planner": [], "policy": [], "tool": []}
    for i in range(_int_env("WARRANT_BENCH_PLANNER_PROCESSES", 1)):
        names["planner"].append(f"lat-planner{i}")
        w.start("warrant.broker.app", ["planner"], sizes["planner"], names["planner"][-1])
    names["policy"].append("lat-policy")
    w.start("warrant.broker.app", ["policy"], sizes["policy"], "lat-policy")
    names["tool"].append("lat-tool")
    w.start("warrant.broker.app", ["tool.http_read"], sizes["tool"], "lat-tool")
    w.wait_ready(warrant_app, [n for ns in names.values() for n in ns], timeout=120)
    pids = iter(p.pid for p in w.procs)
    roles = {role: [next(pids) for _ in ns] for role, ns in names.items()}
    pools = {role: _pool_of(role, c) for role, c in sizes.items()}
    pools["planner"] += f" x{len(names['planner'])} processes" if len(names["planner"]) > 1 else ""
    return WarrantStack(w, roles, pools)


def _start_all(start: Callable[[int], str], n: int) -> list[str]:
    """``n`` runs started at once, by :data:`STARTERS` threads."""
    with concurrent.futures.ThreadPoolExecutor(STARTERS) as pool:
        return list(pool.map(start, range(n)))


@dataclasses.dataclass(frozen=True)
class Released:
    """N runs started with the model's gate closed, then released together."""

    run_ids: list[str]
    start_s: float
    """From the first start until every run waited on its first model call (or no more came)."""
    held: int
    """Model calls waiting at the gate when it opened."""
    t0: float
    """When the gate opened (epoch seconds): the measure's start."""


def _release(s: Session, meter: Meter, start: Callable[[int], str]) -> Released:
    """Start ``s.n`` runs (the gate is closed), wait until all of them wait on their first
    model call, or none has come for :data:`SATURATED_S` (the pipeline holds no more at once),
    then open the gate."""
    begun = time.time()
    run_ids = _start_all(start, s.n)
    end = time.monotonic() + s.timeout
    last, since = -1, time.monotonic()
    while (waiting := s.fakes.model.stats()["waiting"]) < s.n:
        now = time.monotonic()
        if waiting != last:
            last, since = waiting, now
        elif now - since > SATURATED_S:
            break
        if meter.tripped:
            raise RuntimeError(meter.tripped)
        if now > end:
            raise TimeoutError(f"{waiting} of {s.n} first model calls arrived in {s.timeout} s")
        time.sleep(0.05)
    t0 = time.time()
    s.fakes.model.open()
    return Released(run_ids, t0 - begun, waiting, t0)


def _wait(done: Callable[[], int], n: int, meter: Meter, timeout: float, what: str) -> None:
    """Until ``done()`` reaches ``n``, the meter trips or ``timeout`` passes."""
    end = time.monotonic() + timeout
    while done() < n:
        if meter.tripped:
            raise RuntimeError(meter.tripped)
        if time.monotonic() > end:
            raise TimeoutError(f"{what}: {done()} of {n} runs finished in {timeout:.0f} s")
        time.sleep(0.1)


def _finished(engine: Any, run_ids: list[str]) -> int:
    from sqlalchemy import text

    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM runs WHERE id = ANY(:r) AND finished_at IS NOT NULL"),
                {"r": run_ids},
            ).scalar_one()
        )


def _check_runs(engine: Any, run_ids: list[str]) -> None:
    """Every run completed with three model calls and two tool calls."""
    from sqlalchemy import text

    with engine.connect() as conn:
        shapes = conn.execute(
            text(
                "SELECT status, stop_reason, model_calls, tool_calls, count(*) FROM runs"
                " WHERE id = ANY(:r) GROUP BY 1, 2, 3, 4"
            ),
            {"r": run_ids},
        ).all()
    expected = ("completed", "FINAL_ANSWER_VALIDATED", STEPS, TOOL_CALLS)
    if [tuple(s[:4]) for s in shapes] != [expected]:
        raise RuntimeError(f"warrant runs did not all end as {expected}: {shapes}")


@dataclasses.dataclass
class Session:
    """What one N's measures share."""

    n: int
    fakes: Fakes
    client: Any
    timeout: float
    profile_dir: Path | None = None
    results: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def measure_warrant(
    s: Session, stack: WarrantStack, profile: Profile, idle: Any, *, profiling: bool
) -> None:
    from warrant.ledger.db import engine_for

    engine = engine_for(ENV["WARRANT_DATABASE_URL"])
    spec = agent_spec(s.fakes.model.root)
    s.fakes.configure(profile, hold=True)
    spy: _Spy | None = None

    def finished(run_ids: list[str]) -> int:
        if spy is not None:
            spy.poll()
        return _finished(engine, run_ids)

    with _meter(stack.roles, s.fakes) as meter:
        released = _release(s, meter, lambda _: s.client.start_run(spec))
        if profiling and s.profile_dir:
            spy = _Spy(s.profile_dir, stack.roles, s.n)
        try:
            _wait(lambda: finished(released.run_ids), s.n, meter, s.timeout, "warrant")
        finally:
            if spy is not None:
                spy.finish()
    _check_runs(engine, released.run_ids)
    wall = runs_finished_at(released.run_ids) - released.t0
    s.results.append(_result("warrant", s, profile, wall, meter, idle, stack.pools, released))


# --- DBOS ------------------------------------------------------------------------------------


def measure_dbos(s: Session, dbos: Any, profile: Profile, idle: Any) -> None:
    s.fakes.configure(profile, hold=True)
    roles = {"dbos": [dbos.pid()]}
    concurrency = os.environ.get("WARRANT_BENCH_DBOS_AGENT_CONCURRENCY", "1024")

    def start(_: int) -> str:
        run_id = f"d-{uuid.uuid4().hex[:12]}"
        dbos.agent(run_id)
        return run_id

    with _meter(roles, s.fakes) as meter:
        released = _release(s, meter, start)
        _wait(lambda: _rows_done(released.run_ids), s.n, meter, s.timeout, "DBOS")
    baseline_wait(released.run_ids, timeout=10)
    wall = rows_done_at(released.run_ids) - released.t0
    pools = {"dbos": f"queue x{concurrency}"}
    s.results.append(_result("DBOS", s, profile, wall, meter, idle, pools, released))


def _rows_done(run_ids: list[str]) -> int:
    from sqlalchemy import text

    from warrant.ledger.db import engine_for

    with engine_for(ENV["WARRANT_DATABASE_URL"]).connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM bench_rows WHERE stage='done' AND run_id = ANY(:r)"),
                {"r": run_ids},
            ).scalar_one()
        )


def start_dbos(fakes: Fakes) -> Any:
    from bench import dbos_pipeline

    env = {
        **ENV,
        "WARRANT_BENCH_FAKE_MODEL_URL": fakes.model.root,
        "WARRANT_BENCH_FAKE_TOOL_URL": f"{fakes.tool.root}/read",
    }
    dbos = dbos_pipeline.DbosPipeline(env, LOGS)
    dbos.start()
    return dbos


# --- shared ----------------------------------------------------------------------------------


def _meter(roles: dict[str, list[int]], fakes: Fakes) -> Meter:
    url = ENV["WARRANT_DATABASE_URL"]
    name = url.rsplit("/", 1)[1]
    others = {"fake model": [fakes.model.proc.pid], "fake tool": [fakes.tool.proc.pid]}
    admin = url.rsplit("/", 1)[0] + "/postgres"
    return Meter(roles, admin, [name, f"{name}_dbos"], SAMPLE_S, others, ENV["WARRANT_BROKER_URL"])


def _result(
    pipeline: str,
    s: Session,
    profile: Profile,
    wall: float,
    meter: Meter,
    idle: Any,
    pools: dict[str, str],
    released: Released,
) -> dict[str, Any]:
    model, tool = s.fakes.model.stats(), s.fakes.tool.stats()
    return {
        "pipeline": pipeline,
        "n": s.n,
        "profile": profile.name,
        "model_latency": profile.model.label(),
        "tool_latency": profile.tool.label(),
        "start_s": released.start_s,
        "held_at_open": released.held,
        "wall_s": wall,
        "runs_per_s": s.n / wall,
        "steps_per_s": s.n * STEPS / wall,
        "model_calls": model["requests"],
        "tool_calls": tool["requests"],
        "peak_model_in_flight": model["peak_in_flight"],
        "peak_tool_in_flight": tool["peak_in_flight"],
        "model_drawn_p50_p99_s": [model["p50_s"], model["p99_s"]],
        "tool_drawn_p50_p99_s": [tool["p50_s"], tool["p99_s"]],
        "pools": pools,
        "rss_idle_mb": idle.roles,
        "rss_peak_mb": dict(meter.peak.roles),
        "rss_idle_per_process_mb": {r: dict(ps) for r, ps in idle.processes.items()},
        "rss_peak_per_process_mb": {r: dict(ps) for r, ps in meter.peak.processes.items()},
        "cpu_s": meter.cpu,
        "counted": meter.counted,
        "model_peak_in_flight_by_call": model["peak_by_call"],
        "peak_pg_connections": meter.peak_bench_connections,
        "peak_pg_server_connections": meter.peak_server_connections,
    }


class _Spy:
    """py-spy on each role's first worker: ``record`` over the whole measure (folded stacks of
    the threads on a CPU, or with ``WARRANT_BENCH_SPY_GIL=1`` of the GIL's holder, which
    speedscope opens; ``WARRANT_BENCH_SPY_HZ`` samples a second),
    and one ``dump`` of every thread :data:`DUMP_AFTER_S` into it."""

    def __init__(self, out: Path, roles: dict[str, list[int]], n: int) -> None:
        import shutil
        import subprocess
        import sys

        self.spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out.mkdir(parents=True, exist_ok=True)
        self.out, self.n, self.started = out, n, time.monotonic()
        self.targets = {r: pids[0] for r, pids in roles.items()}
        self.procs = []
        for role, pid in self.targets.items():
            record = [
                self.spy,
                "record",
                "--pid",
                str(pid),
                "--subprocesses",
                "--rate",
                str(SPY_HZ),
            ]
            record += ["--nonblocking", "--format", "raw"]  # folded stacks; speedscope opens it
            if os.environ.get("WARRANT_BENCH_SPY_GIL") == "1":
                record.append("--gil")  # only the GIL's holder: where the Python CPU goes
            record += ["-o", str(out / f"{role}-n{n}.folded")]
            log = open(out / f"{role}-record.log", "ab")  # noqa: SIM115
            self.procs.append(subprocess.Popen(record, stdout=log, stderr=log))
        self.dumped = False

    def poll(self) -> None:
        """The dump, once, when its time has come."""
        import subprocess

        if self.dumped or time.monotonic() - self.started < DUMP_AFTER_S:
            return
        self.dumped = True
        for role, pid in self.targets.items():
            with open(self.out / f"{role}-n{self.n}.dump.txt", "wb") as f:
                dump = [self.spy, "dump", "--pid", str(pid), "--subprocesses", "--nonblocking"]
                subprocess.run(dump, stdout=f, stderr=subprocess.STDOUT, timeout=60, check=False)

    def finish(self) -> None:
        import signal

        for p in self.procs:
            p.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        for p in self.procs:
            p.wait(60)


# --- sessions --------------------------------------------------------------------------------


def _warm(s: Session, start: Callable[[], list[str]], done: Callable[[list[str]], int]) -> None:
    """A few zero-latency runs first: pools connected, code imported."""
    s.fakes.configure(profiles(0, 0)[0])
    run_ids = start()
    end = time.monotonic() + 120
    while done(run_ids) < len(run_ids):
        if time.monotonic() > end:
            raise TimeoutError("warm-up runs did not finish")
        time.sleep(0.1)


def warrant_block(s: Session, profs: list[Profile]) -> None:
    """Fresh workers, warm-up, each profile; RSS idle is sampled after the warm-up."""
    from warrant.ledger.db import engine_for

    ENV["WARRANT_DEMO_HTTP_READ_URL"] = f"{s.fakes.tool.root}/read"
    engine = engine_for(ENV["WARRANT_DATABASE_URL"])
    stack = start_warrant()
    try:
        spec = agent_spec(s.fakes.model.root)
        _warm(
            s, lambda: [s.client.start_run(spec) for _ in range(3)], lambda r: _finished(engine, r)
        )
        idle = snapshot(stack.roles)
        for p in profs:
            spied = p.name == ("fixed" if len(profs) > 1 else profs[0].name)
            measure_warrant(s, stack, p, idle, profiling=spied)
    finally:
        stack.workers.stop()


def dbos_block(s: Session, profs: list[Profile]) -> None:
    dbos = start_dbos(s.fakes)
    try:

        def start() -> list[str]:
            run_ids = [f"d-warm-{uuid.uuid4().hex[:8]}" for _ in range(3)]
            for r in run_ids:
                dbos.agent(r)
            return run_ids

        _warm(s, start, _rows_done)
        idle = snapshot({"dbos": [dbos.pid()]})
        for p in profs:
            measure_dbos(s, dbos, p, idle)
    finally:
        dbos.stop()


def _prepare() -> Any:
    """The bench database (created if missing, migrated, with the DBOS pipeline's table), an
    empty broker database, and a client."""
    import psycopg
    import redis
    from sqlalchemy import text

    from bench import baseline
    from warrant.broker.app import app as warrant_app
    from warrant.broker.publish import Publisher
    from warrant.ledger.db import engine_for
    from warrant.ledger.migrate import upgrade
    from warrant.runner.client.api import Client

    url = ENV["WARRANT_DATABASE_URL"]
    admin, name = url.rsplit("/", 1)
    with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
    upgrade(url)
    with engine_for(url).begin() as conn:
        conn.execute(text(baseline.SCHEMA))
    redis.Redis.from_url(ENV["WARRANT_BROKER_URL"]).flushdb()
    return Client(engine=engine_for(url), publisher=Publisher(warrant_app))


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="N=100 only")
    parser.add_argument("--sizes", help="runs started at once, comma-separated (default 100,1000)")
    parser.add_argument("--model-s", type=float, default=1.0, help="model latency (median)")
    parser.add_argument("--tool-s", type=float, default=0.5, help="tool latency (median)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--profile", type=Path, help="py-spy the workers, files into this folder")
    parser.add_argument("--no-dbos", action="store_true", help="warrant only")
    parser.add_argument(
        "--events", action="store_true", help="workers send Celery task events (default: off)"
    )
    parser.add_argument("--only-profile", choices=("zero", "fixed", "long-tail"), action="append")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per measure")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """``argv``: this module's options (default: the command line); ``python -m bench`` calls
    it with its own."""
    from rich.console import Console

    from bench import dbos_pipeline

    args = _args(argv)
    # as python -m bench: off by default, for the workers and this process's client alike
    ENV["WARRANT_TASK_EVENTS"] = os.environ["WARRANT_TASK_EVENTS"] = "1" if args.events else "0"
    sizes = [100] if args.quick else [int(n) for n in (args.sizes or "100,1000").split(",")]
    profs = [
        p for p in profiles(args.model_s, args.tool_s) if p.name in (args.only_profile or [p.name])
    ]
    console = Console(width=max(Console().width, 160))
    client = _prepare()
    skipped = "--no-dbos" if args.no_dbos else dbos_pipeline.missing()
    fakes = Fakes(FakeService("model", LOGS), FakeService("tool", LOGS))
    results: list[dict[str, Any]] = []
    try:
        for i, n in enumerate(sizes):
            spied = args.profile if n == max(sizes) else None  # py-spy: the largest N only
            s = Session(n, fakes, client, args.timeout, spied, results)
            blocks = [warrant_block, *([dbos_block] if skipped is None else [])]
            for block in blocks[:: -1 if i % 2 else 1]:  # the order alternates by N
                with console.status(f"latency: N={n}, {block.__name__}"):
                    block(s, profs)
    finally:
        fakes.stop()
    print_results(console, results, dbos_skipped=skipped)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
