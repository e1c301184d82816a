"""What one message costs a Celery worker that does nothing with it: the floor under each of a
step's three hops (planner, policy, tool).

``python -m bench.celery_floor [--messages N] [--json FILE]`` publishes N no-op tasks to a
scratch Redis database, starts a worker on them (late acknowledgement, prefetch 1, no events,
no results: warrant's settings), and reads the worker process's CPU (user + system) and the
Redis server's commands until the queue and the unacked hash are empty. It does so for the
pools warrant's roles use (threads, solo) with kombu's stock Redis transport and with
warrant's (``warrant.broker._redis_transport``: one client per channel, the unacked lease).
A step costs at least three of these plus three publishes (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import redis

__all__ = ["main"]

BROKER = os.environ.get("WARRANT_BENCH_FLOOR_BROKER_URL", "redis://127.0.0.1:6379/14")

_APP = """
import os
from celery import Celery

app = Celery("floor", broker=os.environ["FLOOR_BROKER"])
app.conf.update(
    task_ignore_result=True,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    worker_send_task_events=False,
    task_send_sent_event=False,
    task_serializer="json",
    worker_hijack_root_logger=False,
)
if os.environ.get("FLOOR_TRANSPORT"):
    app.conf.broker_transport = os.environ["FLOOR_TRANSPORT"]


@app.task(name="noop")
def noop(n):
    return None
"""

#: (label, pool, concurrency, transport): warrant's roles' pools, each on both transports.
CASES = [
    ("threads x64, kombu's transport", "threads", 64, ""),
    (
        "threads x64, warrant's transport",
        "threads",
        64,
        "warrant.broker._redis_transport:Transport",
    ),
    ("solo, kombu's transport", "solo", 1, ""),
    ("solo, warrant's transport", "solo", 1, "warrant.broker._redis_transport:Transport"),
]


def _publish(app_dir: str, env: dict[str, str], n: int) -> float:
    """Publish ``n`` no-op tasks; the publisher's CPU per message (ms)."""
    script = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from floorapp import app, noop\n"
        "t = time.process_time()\n"
        "with app.producer_or_acquire() as p:\n"
        "    for i in range(int(sys.argv[2])): noop.apply_async((i,), producer=p)\n"
        "print(time.process_time() - t)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, app_dir, str(n)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip()) / n * 1000


def _case(app_dir: str, pool: str, concurrency: int, transport: str, n: int) -> dict[str, Any]:
    client = redis.Redis.from_url(BROKER)
    client.flushdb()
    env = {**os.environ, "FLOOR_BROKER": BROKER, "FLOOR_TRANSPORT": transport}
    publish_ms = _publish(app_dir, env, n)
    before = int(client.info("stats")["total_commands_processed"])
    command = [sys.executable, "-m", "celery", "-A", "floorapp", "worker", "-P", pool]
    command += ["-c", str(concurrency), "-l", "warning", "--without-mingle", "--without-gossip"]
    command += ["--without-heartbeat"]
    worker = subprocess.Popen(
        command, cwd=app_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    proc = psutil.Process(worker.pid)
    try:
        started, cpu0 = time.monotonic(), sum(proc.cpu_times()[:2])
        deadline = started + 600
        while client.llen("celery") or client.hlen("unacked"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{client.llen('celery')} messages left after 600 s")
            time.sleep(0.05)
        wall, cpu = time.monotonic() - started, sum(proc.cpu_times()[:2]) - cpu0
        commands = int(client.info("stats")["total_commands_processed"]) - before
    finally:
        worker.terminate()
        worker.wait(30)
        client.flushdb()
    return {
        "publish_cpu_ms": publish_ms,
        "consume_cpu_ms": cpu / n * 1000,
        "messages_per_s": n / wall,
        "redis_commands": commands / n,
    }


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000, help="tasks per case")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as app_dir:
        Path(app_dir, "floorapp.py").write_text(_APP)
        for label, pool, concurrency, transport in CASES:
            results[label] = _case(app_dir, pool, concurrency, transport, args.messages)
    table = Table(title=f"a Celery worker's cost per no-op message ({args.messages} messages)")
    for column in ("pool, transport", "publish CPU ms", "consume CPU ms", "msg/s", "Redis cmds"):
        table.add_column(column, justify="left" if column.startswith("pool") else "right")
    for label, r in results.items():
        table.add_row(
            label,
            f"{r['publish_cpu_ms']:.3f}",
            f"{r['consume_cpu_ms']:.3f}",
            f"{r['messages_per_s']:.0f}",
            f"{r['redis_commands']:.1f}",
        )
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
