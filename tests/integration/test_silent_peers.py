"""Peers that go silent (issue 30): a process frozen with SIGSTOP stands for a vanished host
(its sockets stay open and its kernel acknowledges, but nothing answers). Each test freezes a
process of its own, never a shared server, and waits on facts with deadlines."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import slack, wait_for

pytestmark = pytest.mark.slow

#: A sweep that takes the lock and then waits in its first category until ``go`` exists.
HOLDER = textwrap.dedent(
    """
    import json, pathlib, sys, time
    from warrant.broker.reconciler import stage as r
    from warrant.broker.context import worker_context

    go = pathlib.Path(sys.argv[1])

    def hold(*args, **kwargs):
        print("holding", flush=True)
        while not go.exists():
            time.sleep(0.05)

    r._stale_commands = hold
    print(json.dumps(r.sweep(worker_context()).to_dict()), flush=True)
    """
)

LOCK_TIMEOUT_S = 3.0


@pytest.fixture
def holder(services: Any, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    go = tmp_path / "go"
    env = {**os.environ, "WARRANT_SWEEP_LOCK_TIMEOUT_S": str(LOCK_TIMEOUT_S)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        yield proc, go
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(10)


def test_a_frozen_reconciler_holds_the_sweep_lock_within_its_timeout(holder):
    """The holder's process is frozen mid-sweep: a standby's sweep runs within the lock's
    timeout (plus one sweep), not when TCP gives up hours later. Thawed, the old holder finds
    its lock lost and stops (``lost``) instead of sweeping beside the standby."""
    from warrant.broker.context import worker_context
    from warrant.broker.reconciler.stage import sweep

    proc, go = holder
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "holding"
    ctx = worker_context()
    assert sweep(ctx).locked is False  # a live holder excludes the standby

    os.kill(proc.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    bound = LOCK_TIMEOUT_S + 5
    report = wait_for(
        lambda: (r := sweep(ctx)).locked and r, timeout=bound, what="the standby's sweep"
    )
    took = time.monotonic() - frozen
    print(f"standby swept {took:.1f} s after the holder froze (lock timeout {LOCK_TIMEOUT_S} s)")
    assert report.locked and not report.lost

    go.touch()
    os.kill(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=30)
    old = json.loads(out.strip().splitlines()[-1])
    assert old["locked"] and old["lost"]


# --- the wait's deadline: a frozen PostgreSQL or Redis ---------------------------------------

CLI = [sys.executable, "-m", "warrant.runner.cli"]


def _freeze(pid: int) -> list[int]:
    """SIGSTOP ``pid`` and its children (a server's every session); the pids stopped."""
    import psutil

    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for proc in procs:
        os.kill(proc.pid, signal.SIGSTOP)
    return [p.pid for p in procs]


def _thaw(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def own_pg() -> Iterator[Any]:
    from tests.own_postgres import OwnPostgres, postgres_binaries

    bin_dir = postgres_binaries()
    if bin_dir is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) to start a server of our own")
    server = OwnPostgres(bin_dir=bin_dir).init()
    server.start()
    try:
        from warrant.ledger.migrate import upgrade

        server.url = server.create_database("warrant_silent")
        upgrade(server.url)
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    from tests.own_postgres import _free_port

    port = _free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    wait_for(lambda: _pings(redis, url), timeout=20, what="own redis")
    try:
        yield proc, url
    finally:
        _thaw([proc.pid])
        proc.kill()
        proc.wait(10)


def _pings(redis: Any, url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _spec_file(tmp_path: Path) -> Path:
    from warrant_demo import scenarios as sc

    path = tmp_path / "spec.json"
    path.write_text(json.dumps(sc.spec([sc.search("p1"), sc.final("x", "tool-1")])))
    return path


def _start_waiting(
    tmp_path: Path, *, database_url: str, broker_url: str, timeout_s: float
) -> subprocess.Popen[str]:
    env = {**os.environ, "WARRANT_DATABASE_URL": database_url, "WARRANT_BROKER_URL": broker_url}
    argv = [*CLI, "run", "start", str(_spec_file(tmp_path)), "--wait"]
    return subprocess.Popen(
        [*argv, "--timeout", str(timeout_s), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _ended(proc: subprocess.Popen[str], began: float, *, within_s: float) -> tuple[float, str]:
    try:
        out, _ = proc.communicate(timeout=within_s + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - began
    return took, out


@pytest.mark.parametrize("when", ["before", "during"])
def test_run_start_wait_honours_its_timeout_with_postgres_frozen(own_pg, own_redis, tmp_path, when):
    """``run start --wait --timeout T`` with the ledger's server frozen before the command
    (no connection answers) or while it follows the run (its pooled connection's query gets
    no reply): exit 5 ``WAIT_TIMED_OUT`` within T + the grace, not when the server thaws."""
    from warrant.runner.cli.start import GRACE_S

    _, broker_url = own_redis
    timeout_s = 3.0 if when == "before" else 6.0
    postmaster = int((own_pg.data / "postmaster.pid").read_text().split()[0])
    frozen: list[int] = []
    try:
        if when == "before":
            frozen = _freeze(postmaster)
        began = time.monotonic()
        proc = _start_waiting(
            tmp_path, database_url=own_pg.url, broker_url=broker_url, timeout_s=timeout_s
        )
        if when == "during":
            assert proc.stderr is not None
            assert proc.stderr.readline().startswith("run ")  # started: now following
            frozen = _freeze(postmaster)
        took, out = _ended(proc, began, within_s=timeout_s + GRACE_S)
    finally:
        _thaw(frozen)
    print(f"--wait --timeout {timeout_s:g}, postgres frozen {when}: exit {proc.returncode} "
          f"after {took:.1f} s")  # fmt: skip
    assert proc.returncode == 5, out
    assert json.loads(out)["error"]["code"] == "WAIT_TIMED_OUT"
    assert took < timeout_s + GRACE_S + slack(4)


def test_run_start_wait_honours_its_timeout_with_redis_frozen(own_pg, own_redis, tmp_path):
    """The broker frozen: the start's publish gets no reply. The run is recorded (the stall
    sweep publishes it later), and the command exits within its timeout: 5 ``WAIT_TIMED_OUT``
    or, once the broker's socket timeout fires first, 3 ``BROKER_UNAVAILABLE``."""
    from warrant.runner.cli.start import GRACE_S

    redis_proc, broker_url = own_redis
    timeout_s = 3.0
    frozen = _freeze(redis_proc.pid)
    try:
        began = time.monotonic()
        proc = _start_waiting(
            tmp_path, database_url=own_pg.url, broker_url=broker_url, timeout_s=timeout_s
        )
        took, out = _ended(proc, began, within_s=timeout_s + GRACE_S)
    finally:
        _thaw(frozen)
    print(
        f"--wait --timeout {timeout_s:g}, redis frozen: exit {proc.returncode} after {took:.1f} s"
    )
    code = json.loads(out)["error"]["code"]
    assert (proc.returncode, code) in {(5, "WAIT_TIMED_OUT"), (3, "BROKER_UNAVAILABLE")}, out
    assert took < timeout_s + GRACE_S + slack(4)


def _start(tmp_path: Path, *, database_url: str, broker_url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "WARRANT_DATABASE_URL": database_url, "WARRANT_BROKER_URL": broker_url}
    return subprocess.Popen(
        [*CLI, "run", "start", str(_spec_file(tmp_path)), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _start_with_frozen(
    pid: int, tmp_path: Path, *, database_url: str, broker_url: str, bound: float
) -> tuple[subprocess.Popen[str], float, str]:
    """``run start`` (no ``--wait``) while ``pid`` is frozen: the process, seconds, stdout."""
    frozen = _freeze(pid)
    try:
        began = time.monotonic()
        proc = _start(tmp_path, database_url=database_url, broker_url=broker_url)
        took, out = _ended(proc, began, within_s=bound)
    finally:
        _thaw(frozen)
    return proc, took, out


def test_run_start_without_wait_ends_within_its_timeouts_with_postgres_frozen(
    own_pg, own_redis, tmp_path
):
    """No ``--wait``: the insert's connection gets no answer; the command gives up after the
    ledger's connect timeouts (``WARRANT_DB_CONNECT_TIMEOUT_S``, libpq tries twice) with
    ``DATABASE_UNAVAILABLE``, not when the server thaws."""
    from warrant.runner.settings import WarrantSettings

    _, broker_url = own_redis
    bound = 2 * WarrantSettings().db_connect_timeout_s + slack(8)
    postmaster = int((own_pg.data / "postmaster.pid").read_text().split()[0])
    proc, took, out = _start_with_frozen(
        postmaster, tmp_path, database_url=own_pg.url, broker_url=broker_url, bound=bound
    )
    print(f"run start, postgres frozen: exit {proc.returncode} after {took:.1f} s")
    assert json.loads(out)["error"]["code"] == "DATABASE_UNAVAILABLE", out
    assert proc.returncode != 0
    assert took < bound


def test_run_start_without_wait_ends_within_its_timeouts_with_redis_frozen(
    own_pg, own_redis, tmp_path
):
    """No ``--wait``, the broker frozen: the run is recorded, the publish gives up after the
    broker's socket timeout: 3 ``BROKER_UNAVAILABLE`` naming the run (the stall sweep
    publishes it once the broker is back)."""
    from sqlalchemy import create_engine, text

    from warrant.runner.settings import WarrantSettings

    redis_proc, broker_url = own_redis
    bound = 2 * WarrantSettings().broker_socket_timeout_s + slack(8)
    proc, took, out = _start_with_frozen(
        redis_proc.pid, tmp_path, database_url=own_pg.url, broker_url=broker_url, bound=bound
    )
    print(f"run start, redis frozen: exit {proc.returncode} after {took:.1f} s")
    error = json.loads(out)["error"]
    assert (proc.returncode, error["code"]) == (3, "BROKER_UNAVAILABLE"), out
    assert took < bound
    engine = create_engine(own_pg.url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            status = conn.execute(
                text("SELECT status FROM runs WHERE id = :id"), {"id": error["run_id"]}
            ).scalar_one()
    finally:
        engine.dispose()
    assert status == "running"
