"""Replay speed: N recorded runs of the benchmark's shape decided again, against the time
the live runs took (issue 55).

    python -m bench.replay [--runs 1000] [--steps 5] [--quick] [--json FILE]

Starts a planner, a policy and a ``noop_read`` tool worker (one prefork process each, as
``python -m bench``'s side-by-side part), runs N runs of ``read_steps(steps)`` at once and
takes their wall time (the first start to the last end, on the ledger's clock). Then replays
the same N runs in this process as ``warrant policy diff`` does (read in batches, each
proposal through the gate, nothing executed or recorded) under today's policy and under a
candidate that makes every ``noop_read`` call need a confirmation, and prints each replay's
time and its ratio to the live runs' (the same machine, the same run). The first replay must
change no decision and the second every one: the bench fails otherwise.

Then one long run (``--long-steps``, 400 reads) is recorded and replayed: its replay's time per
decision against the short runs' time per decision must stay flat (a replay reads each of a
run's records once: linear in its length; it was quadratic, a 1,600-step run took 9.4 s). The
bench fails above 3x.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/warrant_bench_replay"
#: The same broker as ``python -m bench`` (its Celery app may be loaded already: a part of it).
DEFAULT_BROKER = "redis://127.0.0.1:6379/13"
ENV = {
    **os.environ,
    "WARRANT_DATABASE_URL": os.environ.get("WARRANT_BENCH_REPLAY_DATABASE_URL", DEFAULT_DB),
    "WARRANT_BROKER_URL": os.environ.get("WARRANT_BENCH_BROKER_URL", DEFAULT_BROKER),
    "WARRANT_TOOLS": "warrant_demo:plugin",
}
os.environ.update(
    {k: ENV[k] for k in ("WARRANT_DATABASE_URL", "WARRANT_BROKER_URL", "WARRANT_TOOLS")}
)

import psycopg  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy import text  # noqa: E402
from warrant_demo.scenarios import read_steps  # noqa: E402

from warrant.ledger.db import engine_for  # noqa: E402
from warrant.ledger.migrate import upgrade  # noqa: E402
from warrant.runner.replay import diff_summary, replay_run  # noqa: E402
from warrant.runner.stack.roles import worker_command  # noqa: E402

LOGS = Path(os.environ.get("WARRANT_BENCH_LOGS", "/tmp/warrant-bench"))
#: Every ``noop_read`` call waits for a person: the replay's every decision changes.
CONFIRM_READS = {
    "name": "reads-confirmed",
    "contracts": {"noop_read": {"confirmation": "per-call"}},
}


def _fresh_database(url: str) -> None:
    admin, name = url.rsplit("/", 1)
    with psycopg.connect(admin + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    upgrade(url)


def _workers() -> list[subprocess.Popen[bytes]]:
    LOGS.mkdir(parents=True, exist_ok=True)
    procs = []
    for role, tools in (("planner", None), ("policy", None), ("tool", ["noop_read"])):
        out = open(LOGS / f"replay-{role}.log", "ab")  # noqa: SIM115
        command = worker_command(
            role, tools=tools, concurrency=1, name=f"replay-{role}-{uuid.uuid4().hex[:6]}@%h"
        )
        procs.append(
            subprocess.Popen(command, env=ENV, stdout=out, stderr=out, start_new_session=True)
        )
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def _live(client: Any, runs: int, steps: int, timeout_s: float) -> tuple[list[str], float]:
    """N runs started at once; their ids and wall time on the ledger's clock."""
    ids = [client.start_run(read_steps(steps)) for _ in range(runs)]
    end = time.monotonic() + timeout_s
    for run_id in ids:
        info = client.wait(run_id, timeout=max(1.0, end - time.monotonic()))
        if info.status != "completed":
            raise SystemExit(f"live run {run_id} ended {info.status} {info.stop_reason}")
    with client.engine.connect() as conn:
        wall = conn.execute(
            text(
                "SELECT extract(epoch FROM max(finished_at) - min(created_at)) FROM runs"
                " WHERE id = ANY(:ids)"
            ),
            {"ids": ids},
        ).scalar_one()
    return ids, float(wall)


def _replay(
    client: Any, ids: list[str], candidate: dict[str, Any] | None
) -> tuple[float, dict[str, Any]]:
    from warrant.runner.client.replays import current_policy

    started = time.perf_counter()
    policy = current_policy(candidate)
    reports = [replay_run(r, policy) for r in client._recorded(ids)]
    took = time.perf_counter() - started
    return took, diff_summary(reports)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="100 runs")
    parser.add_argument("--long-steps", type=int, default=400, help="the long run's steps")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    runs = 100 if args.quick else args.runs
    console = Console()
    _fresh_database(ENV["WARRANT_DATABASE_URL"])
    import redis

    redis.Redis.from_url(ENV["WARRANT_BROKER_URL"]).flushdb()
    from warrant.broker.app import app
    from warrant.broker.publish import Publisher
    from warrant.runner.client.api import Client

    client = Client(engine=engine_for(ENV["WARRANT_DATABASE_URL"]), publisher=Publisher(app))
    procs = _workers()
    try:
        client.wait(client.start_run(read_steps(args.steps)), timeout=120)  # the pools warm
        with console.status(f"{runs} live runs of {args.steps} reads"):
            ids, live_s = _live(client, runs, args.steps, timeout_s=60 + runs * args.steps)
        with console.status(f"one live run of {args.long_steps} reads"):
            long_id = client.start_run(read_steps(args.long_steps))
            client.wait(long_id, timeout=60 + args.long_steps)
    finally:
        _stop(procs)
    with console.status(f"replaying {runs} runs"):
        same_s, same = _replay(client, ids, None)
        changed_s, changed = _replay(client, ids, CONFIRM_READS)
        long_s, long_run = _replay(client, [long_id], None)
    per_short = same_s / max(same["decisions"], 1)
    per_long = long_s / max(long_run["decisions"], 1)
    figures = {
        "runs": runs,
        "steps": args.steps,
        "decisions": same["decisions"],
        "live_s": round(live_s, 3),
        "replay_s": round(same_s, 3),
        "replay_ratio": round(same_s / live_s, 4),
        "replay_changed": same["changed"],
        "candidate_s": round(changed_s, 3),
        "candidate_ratio": round(changed_s / live_s, 4),
        "candidate_changed": changed["changed"],
        "long_steps": args.long_steps,
        "long_decisions": long_run["decisions"],
        "long_replay_s": round(long_s, 3),
        "per_decision_ratio": round(per_long / per_short, 3),
    }
    table = Table(title=f"{runs} recorded runs of {args.steps} reads: replay vs the live runs")
    for column in ("", "seconds", "vs live", "decisions changed"):
        table.add_column(column, justify="right")
    table.add_row("live runs", f"{live_s:.2f}", "1.00", "")
    table.add_row(
        "replay, today's policy", f"{same_s:.2f}", f"{same_s / live_s:.3f}", str(same["changed"])
    )
    table.add_row(
        "replay, candidate",
        f"{changed_s:.2f}",
        f"{changed_s / live_s:.3f}",
        str(changed["changed"]),
    )
    console.print(table)
    console.print(
        f"one run of {args.long_steps} steps replayed in {long_s:.2f} s: "
        f"{per_long * 1e3:.3f} ms per decision against {per_short * 1e3:.3f} ms in the short "
        f"runs ({per_long / per_short:.2f}x; linear in a run's length is about 1x)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    expected = runs * args.steps
    if same["changed"] != 0 or changed["changed"] != expected or same["decisions"] != expected:
        print(f"replay bench: unexpected decisions {figures}", file=sys.stderr)
        return 1
    if long_run["decisions"] != args.long_steps or per_long > 3 * per_short:
        print(f"replay bench: a long run's replay is not linear {figures}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
