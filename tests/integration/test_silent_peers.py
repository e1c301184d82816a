"""Peers that go silent (issue 30): a process frozen with SIGSTOP stands for a vanished host
(its sockets stay open and its kernel acknowledges, but nothing answers). Each test freezes a
process of its own, never a shared server, and waits on facts with deadlines."""

from __future__ import annotations

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

from tests.conftest import wait_for

pytestmark = pytest.mark.slow

#: A sweep that takes the lock and then waits in its first category until ``go`` exists.
HOLDER = textwrap.dedent(
    """
    import json, pathlib, sys, time
    from warrant.broker import stage_reconciler as r
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
    from warrant.broker.stage_reconciler import sweep

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
