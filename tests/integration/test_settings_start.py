"""A bad ``WARRANT_*`` value stops a process as it starts (``SETTINGS_INVALID``, naming the
variable), never later in the middle of a run: every CLI command, ``warrant worker``, ``up``,
``serve``, the MCP gateway, and a plain Celery worker importing the app. No service is touched:
the URLs point at a closed port and the data folder is the test's own."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from warrant_demo import scenarios as sc

from tests.integration.test_cli import warrant
from warrant.ledger.db import session_scope
from warrant.ledger.models import Run

BAD = {"WARRANT_LEASE_HEARTBEAT_S": "-1"}


def _nowhere(tmp_path: Path) -> dict[str, str]:
    return {
        "WARRANT_BROKER_URL": "redis://127.0.0.1:9/0",
        "WARRANT_DATABASE_URL": "postgresql://postgres@127.0.0.1:9/nowhere",
        "WARRANT_DATA_DIR": str(tmp_path / "data"),
        "WARRANT_SERVER_URL": "",
        **BAD,
    }


@pytest.mark.parametrize(
    "command",
    [
        ["tools", "list"],
        ["run", "list"],
        ["worker", "--role", "planner"],
        ["worker", "--role", "tool", "--tools", "search_public"],
        ["up"],
        ["serve", "--port", "9"],
        ["mcp", "serve", "--spec", "no-such-spec.json"],
        ["reconcile"],
    ],
    ids=" ".join,
)
def test_a_bad_setting_stops_the_command_at_start(tmp_path: Path, command: list[str]):
    began = time.monotonic()
    out = warrant(*command, "--json", env=_nowhere(tmp_path), timeout=60)
    assert time.monotonic() - began < 30
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "SETTINGS_INVALID"
    assert "WARRANT_LEASE_HEARTBEAT_S" in error["message"]
    assert not (tmp_path / "data").exists()  # nothing was started


@pytest.mark.parametrize("command", [["run", "list"], ["worker"], ["mcp", "serve"]], ids=" ".join)
def test_help_is_readable_under_a_bad_setting(tmp_path: Path, command: list[str]):
    """A user who set a bad value can still read how a command is used (and nothing starts)."""
    out = warrant(*command, "--help", env=_nowhere(tmp_path), timeout=60)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "Usage" in out.stdout and "SETTINGS_INVALID" not in out.stdout + out.stderr
    assert not (tmp_path / "data").exists()


def test_without_json_one_line_names_the_code_and_the_variable(tmp_path: Path):
    out = warrant("worker", "--role", "planner", env=_nowhere(tmp_path), timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "SETTINGS_INVALID" in out.stderr and "WARRANT_LEASE_HEARTBEAT_S" in out.stderr


def test_a_plain_celery_worker_stops_as_it_loads_the_app(tmp_path: Path):
    import os

    began = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "warrant.broker.app", "worker", "-P", "solo"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **_nowhere(tmp_path)},
    )
    assert time.monotonic() - began < 30
    assert out.returncode != 0
    assert "SettingsInvalid" in out.stderr and "WARRANT_LEASE_HEARTBEAT_S" in out.stderr, (
        out.stderr[-2000:]
    )


def test_a_broker_url_of_no_transport_writes_no_run(tmp_path: Path, engine):
    """``WARRANT_BROKER_URL=foo://nowhere warrant run start`` used to create a ``running`` run,
    then fail ``INTERNAL_ERROR`` (no such transport) with no run id: the run later failed
    ``DEADLINE_REACHED``. The URL is now refused before anything is written."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(sc.spec([sc.final("nothing", "user-1")])))
    with session_scope(engine) as s:
        before = s.scalar(select(func.count()).select_from(Run))
    out = warrant("run", "start", str(spec), "--json", env={"WARRANT_BROKER_URL": "foo://nowhere"})
    assert out.returncode == 2, (out.stdout, out.stderr)
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "SETTINGS_INVALID" and "WARRANT_BROKER_URL" in error["message"]
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Run)) == before
