"""A short chaos run (``make chaos`` is the full one): its own Redis, PostgreSQL and workers,
at least one fault of each kind, then the checker must find nothing lost, duplicated, unexpected or
unresolved."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

PG_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.mark.skipif(
    shutil.which("redis-server") is None or not (PG_BIN / "initdb").exists(),
    reason="needs redis-server and PostgreSQL 15 binaries",
)
def test_short_chaos_run_loses_and_duplicates_nothing() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.chaos",
            "--runs",
            "20",
            "--faults-per-kind",
            "1",
            "--rate",
            "2",
            "--drain-s",
            "90",
            "--max-load-s",
            "150",
            "--quiet",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["runs"] >= 20
    # Every kind at least once (duplicate deliveries need a slow write in flight: on 2 loaded
    # cores a short run finds only a few); `make chaos` enforces its 50 of each.
    assert all(n >= 1 for n in report["faults"].values()), report["faults"]
    counts = report["check"]["counts"]
    failing = [f for f in report["check"]["findings"] if f["category"] != "handoffs"]
    assert (
        counts["lost"],
        counts["duplicated"],
        counts["unexpected"],
        counts["unresolved"],
    ) == (0, 0, 0, 0), failing
    assert done.returncode == 0
