"""CLI start-up: ``warrant --version`` and ``warrant run list`` against ``celery --version``.

    python -m bench.cli_startup [--runs 10] [--json]

Each command runs ``--runs`` times, interleaved (a drift in the machine's speed weighs on all
three alike); the table gives the median wall time of each, its ratio to ``celery --version``
(the same interpreter starting Celery's own command line: the floor a Celery-based CLI is
measured against) and the target. ``run list`` reads a real ledger: ``WARRANT_DATABASE_URL``
(default the benchmark's database, migrated first) and never starts a tool or an MCP server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/warrant_bench"
DEFAULT_BROKER = "redis://127.0.0.1:6379/13"

#: Seconds, on the project's 2-core machine (issue 29).
TARGETS = {"warrant --version": 0.3, "warrant run list": 0.8}


def _commands() -> dict[str, list[str]]:
    bin_dir = Path(sys.executable).parent
    return {
        "celery --version": [str(bin_dir / "celery"), "--version"],
        "warrant --version": [str(bin_dir / "warrant"), "--version"],
        "warrant run list": [str(bin_dir / "warrant"), "run", "list", "--limit", "20"],
    }


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-500:]}")
    return elapsed


def measure(runs: int) -> dict[str, dict[str, float | None]]:
    env = {
        **os.environ,
        "WARRANT_DATABASE_URL": os.environ.get("WARRANT_DATABASE_URL") or DEFAULT_DB,
        "WARRANT_BROKER_URL": os.environ.get("WARRANT_BROKER_URL") or DEFAULT_BROKER,
    }
    from tests.services import ensure_database
    from warrant.ledger.migrate import upgrade

    ensure_database(env["WARRANT_DATABASE_URL"])
    upgrade(env["WARRANT_DATABASE_URL"])
    commands = _commands()
    for command in commands.values():  # warm the file cache and the byte-code
        _timed(command, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(_timed(command, env))
    floor = statistics.median(times["celery --version"])
    return {
        name: {
            "median_s": round(statistics.median(values), 3),
            "min_s": round(min(values), 3),
            "vs_celery": round(statistics.median(values) / floor, 2),
            "target_s": TARGETS.get(name),
        }
        for name, values in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure(args.runs)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'command':<22} {'median':>8} {'min':>8} {'x celery':>9} {'target':>8}  met")
    for name, r in results.items():
        target = r["target_s"]
        met = "-" if target is None else ("yes" if (r["median_s"] or 0) < target else "NO")
        shown = f"{target:.2f}" if target is not None else "-"
        print(
            f"{name:<22} {r['median_s']:>7.3f}s {r['min_s']:>7.3f}s {r['vs_celery']:>8.2f}x "
            f"{shown:>8}  {met}"
        )


if __name__ == "__main__":
    main()
