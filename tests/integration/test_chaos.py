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


def _run_chaos(command: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run the suite; if this test is interrupted (Ctrl-C) or times out, SIGTERM it and wait
    for its clean-up, so its workers and servers never outlive the test (``subprocess.run``
    SIGKILLed it, which left them all running)."""
    import signal

    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,  # a Ctrl-C reaches pytest alone; the suite is told below
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.mark.skipif(
    shutil.which("redis-server") is None or not (PG_BIN / "initdb").exists(),
    reason="needs redis-server and PostgreSQL 15 binaries",
)
def test_short_chaos_run_loses_and_duplicates_nothing() -> None:
    done = _run_chaos(
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
        timeout=600,
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


def _chaos_processes(workdir: str) -> list[int]:
    """Processes of the chaos run in ``workdir``: its servers (their data folders are there)
    and its workers (their data folder, ``WARRANT_DATA_DIR``, is there)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(workdir in part for part in proc.info["cmdline"] or []) or proc.environ().get(
                "WARRANT_DATA_DIR", ""
            ).startswith(workdir):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.skipif(
    shutil.which("redis-server") is None or not (PG_BIN / "initdb").exists(),
    reason="needs redis-server and PostgreSQL 15 binaries",
)
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_chaos_run_stops_its_whole_stack(how: str) -> None:
    """Ctrl-C (or SIGTERM) while the chaos suite runs: it stops its workers and servers before
    it exits (they were left running, orphaned)."""
    import os
    import signal
    import time

    from tests.conftest import wait_for

    command = [sys.executable, "-m", "bench.chaos", "--runs", "200", "--rate", "2", "--keep"]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )
    workdir = None
    try:
        assert proc.stderr is not None
        end = time.monotonic() + 120
        while workdir is None and time.monotonic() < end:
            line = proc.stderr.readline()
            assert line, "the chaos suite ended before its servers were up"
            if "servers up in " in line:
                workdir = line.split("servers up in ", 1)[1].split(" ", 1)[0]
        assert workdir, "no 'servers up' line"
        while time.monotonic() < end:  # the load phase reports progress: workers are serving
            line = proc.stderr.readline()
            assert line, "the chaos suite ended before its load phase"
            if " runs " in line and " live " in line:
                break
        assert len(_chaos_processes(workdir)) >= 4, "its servers and workers"
        proc.send_signal(getattr(signal, how))
        assert proc.wait(120) == 130
        assert wait_for(lambda: not _chaos_processes(workdir), timeout=30, what="no orphans")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()
        for pid in _chaos_processes(workdir) if workdir else []:
            os.kill(pid, signal.SIGKILL)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.skipif(
    shutil.which("redis-server") is None or not (PG_BIN / "initdb").exists(),
    reason="needs redis-server and PostgreSQL 15 binaries",
)
def test_short_concurrency_campaign_keeps_every_promise() -> None:
    """Issue 47's campaign, short: duplicated deliveries to the threaded tool worker, a 20 s
    Redis stall, a shared cap, kills and restarts; `make chaos-concurrency` is the full one."""
    done = _run_chaos(
        [
            sys.executable,
            "-m",
            "bench.chaos",
            "--campaign",
            "concurrency",
            "--runs",
            "120",
            "--rate",
            "8",
            "--faults-per-kind",
            "1",
            "--drain-s",
            "120",
            "--max-load-s",
            "150",
            "--quiet",
            "--json",
        ],
        timeout=600,
    )
    assert done.stdout, done.stderr[-3000:]
    report = json.loads(done.stdout)
    figures = report["concurrency"]
    counts = report["check"]["counts"]
    failing = [f for f in report["check"]["findings"] if f["category"] != "handoffs"]
    assert (counts["lost"], counts["duplicated"], counts["unexpected"], counts["unresolved"]) == (
        0,
        0,
        0,
        0,
    ), failing
    assert report["faults"]["redis_stall"] >= 1 and report["faults"]["duplicate_delivery"] >= 1
    assert figures["second_live_attempts"] == 0, figures
    assert figures["false_worker_lost"] == 0, figures
    assert figures["over_cap"] == 0, figures
    assert figures["cancel_to_stop_p95_s"] <= 2.0, figures
    assert figures["unacked_max_age_s"] <= 60, figures
    assert done.returncode == 0, report
