"""A stage's clock is the database's, read from a host whose own clock is skewed (issue 30).

A process whose clocks libfaketime moves 120 s ahead still reads the database's time through
:class:`warrant.ledger.db_clock.DatabaseClock` (the deadlines and reissue times it compares
are the database's), and a tool's ``remaining_s`` counts on that clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

pytestmark = pytest.mark.services

_PROBE = """
import json, sys, time
from warrant.ledger.db import engine_for
from warrant.ledger.db_clock import DatabaseClock
from warrant.tools._contract import ToolContext
clock = DatabaseClock(engine_for(sys.argv[1]))
db_now = clock()
ctx = ToolContext(run_id="r", command_id="c", subject="s", idempotency_token="t", attempt=1,
                  deadline_at=db_now + 30.0, deps=None, clock=clock)
print(json.dumps({"host": time.time(), "db": clock(), "offset": clock.offset_s,
                  "remaining": ctx.remaining_s()}))
"""


def test_the_database_clock_corrects_a_skewed_host(services, engine):
    libs = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not libs:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    env = {
        **os.environ,
        "LD_PRELOAD": str(libs[0]),
        "FAKETIME": "+120s",
        "FAKETIME_DONT_RESET": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, services.database_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    probe = json.loads(done.stdout)
    with engine.connect() as conn:
        db_now = float(conn.execute(text("SELECT extract(epoch FROM now())")).scalar_one())
    assert 110 < probe["host"] - db_now < 130, "libfaketime did not move the probe's clock"
    assert abs(probe["db"] - db_now) < 5, probe
    assert -130 < probe["offset"] < -110
    assert 25 < probe["remaining"] <= 30


def test_an_unreachable_database_keeps_the_last_offset_and_does_not_block(services):
    from warrant.ledger.db import engine_for
    from warrant.ledger.db_clock import DatabaseClock

    # nothing listens on port 9 of loopback: a refused connection, at once
    clock = DatabaseClock(engine_for("postgresql+psycopg://nobody@127.0.0.1:9/none"))
    started = time.monotonic()
    now = clock()
    assert time.monotonic() - started < 5
    assert abs(now - time.time()) < 1  # no reading yet: the host's own clock
    assert clock.readings == 0
