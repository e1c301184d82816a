"""The ``warrant`` CLI as a user runs it (a real subprocess against the real services)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from warrant_demo import scenarios as sc

from warrant.runner.stack.roles import role_of_node

pytestmark = [pytest.mark.services, pytest.mark.slow]


def warrant(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warrant.runner.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_run_start_wait_show_list_trace(tmp_path: Path, worker):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")])))
    started = warrant("run", "start", str(spec), "--wait", "--json")
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert (info["status"], info["stop_reason"]) == ("completed", "FINAL_ANSWER_VALIDATED")

    shown = json.loads(warrant("run", "show", info["run_id"], "--json").stdout)
    assert shown["answer"] == "Three." and shown["version"] == info["version"]
    listed = json.loads(warrant("run", "list", "--json").stdout)
    assert info["run_id"] in [r["run_id"] for r in listed]
    document = json.loads(warrant("run", "trace", info["run_id"], "--json").stdout)
    assert document["run_id"] == info["run_id"]  # the HTTP API's shape, not a bare list
    trace = document["events"]
    said = [e["event"] for e in trace if e["event"] != "ledger.rows_hashed"]  # the chain's
    assert said[-1] == "run.stopped" and trace[-1]["event"] == "ledger.rows_hashed"
    assert [e["seq"] for e in trace] == list(range(1, len(trace) + 1))
    readable = warrant("run", "trace", info["run_id"])
    assert readable.returncode == 0 and "run.stopped" in readable.stdout


def test_bad_spec_exits_2_and_names_the_field(tmp_path: Path, services):
    spec = sc.spec([])
    spec["budgets"]["max_steps"] = "many"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec))
    out = warrant("run", "start", str(path), "--json")
    assert out.returncode == 2
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "SPEC_INVALID"
    assert [e["field"] for e in error["errors"]] == ["budgets.max_steps"]
    human = warrant("run", "start", str(path))
    assert human.returncode == 2 and "budgets.max_steps" in human.stderr


def test_unknown_run_and_unreadable_file(services, tmp_path: Path):
    out = warrant("run", "show", "no-such-run", "--json")
    assert out.returncode == 2 and json.loads(out.stdout)["error"]["code"] == "RUN_NOT_FOUND"
    out = warrant("run", "start", str(tmp_path / "missing.json"), "--json")
    assert out.returncode == 2 and json.loads(out.stdout)["error"]["code"] == "SPEC_INVALID"


def test_tools_list_exports_mcp_shaped_contracts():
    out = warrant("tools", "list", "--json")
    assert out.returncode == 0
    tools = {t["name"]: t for t in json.loads(out.stdout)["tools"]}
    assert set(tools) >= {"search_public", "write_artifact", "save_preference"}
    save = tools["save_preference"]
    assert save["inputSchema"]["type"] == "object"
    assert set(save["inputSchema"]["properties"]) == {"key", "value", "expected_version"}
    assert save["inputSchema"]["additionalProperties"] is False
    assert save["confirmation"] == "per-call" and save["sensitiveFields"] == ["value"]
    assert "outputSchema" in save
    assert save["verification"] == "verify" and "unverifiedReason" not in save
    notice = tools["send_notice"]  # a write nothing reads back: why, in JSON and in text
    assert (
        notice["verification"] == "unverified" and "no status query" in notice["unverifiedReason"]
    )
    assert [w["code"] for w in notice["warnings"]] == ["WRITE_UNVERIFIED"]
    text = warrant("tools", "list").stdout
    assert "WRITE_UNVERIFIED" in text and "no status query" in " ".join(text.split())


def test_db_upgrade_is_idempotent(services):
    out = warrant("db", "upgrade", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["revision"]


def test_services_not_configured_is_a_clear_error(tmp_path: Path):
    env = {"WARRANT_BROKER_URL": "", "WARRANT_DATABASE_URL": "", "WARRANT_DATA_DIR": str(tmp_path)}
    out = warrant("run", "list", "--json", env=env)
    assert out.returncode == 3
    assert json.loads(out.stdout)["error"]["code"] == "SERVICES_NOT_CONFIGURED"


def test_demo_against_configured_services(services):
    out = warrant("demo", "--json", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["scenarios"]
    assert rows and all(r["ok"] for r in rows), rows


def test_demo_with_embedded_servers(tmp_path: Path):
    """No URLs configured: the demo starts its own Redis and PostgreSQL, and stops them: no
    process is left working in the data folder (redis-server and postgres chdir there)."""
    from tests.integration.test_faults import processes_in

    env = {
        "WARRANT_BROKER_URL": "",
        "WARRANT_DATABASE_URL": "",
        "WARRANT_DATA_DIR": str(tmp_path / "data"),
    }
    out = warrant("demo", "--json", env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)["scenarios"]
    assert len(rows) == len(sc.SCENARIOS) and all(r["ok"] for r in rows)
    assert not (tmp_path / "data" / "services.json").exists()
    assert (tmp_path / "data" / "postgres" / "PG_VERSION").exists()
    assert not processes_in(tmp_path / "data"), "embedded servers outlived the demo"


# The test leaves the ``up`` process's stdout/stderr pipes open (to fix there: close them).
@pytest.mark.filterwarnings(r"ignore:unclosed file <_io\.TextIOWrapper name=\d+:ResourceWarning")
def test_up_runs_every_role_and_the_server_and_ctrl_c_stops_them(services, tmp_path: Path):
    """``up --serve PORT`` runs ``warrant serve`` with the workers, on the stack's own URLs
    (a separate ``serve`` went stale when the stack restarted), and stops it with them."""
    import signal
    import socket

    import httpx

    from tests.conftest import wait_for
    from warrant.broker.app import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "warrant.runner.cli", "up", "--serve", str(port), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "WARRANT_DATA_DIR": str(tmp_path)},
    )
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        assert first.strip().startswith("{"), proc.stderr.read() if proc.stderr else ""

        def roles() -> set[str]:
            replies = app.control.ping(timeout=0.5) or []
            return {role_of_node(name) for reply in replies for name in reply}

        wait_for(lambda: {"planner", "policy", "tool"} <= roles(), what="up's workers")
        lines = [first]
        while proc.stdout and lines[-1].rstrip() != "}":  # `up --json` prints one document
            lines.append(proc.stdout.readline())
        info = json.loads("".join(lines))
        assert info["server_url"] == f"http://127.0.0.1:{port}" and "serve" in info["workers"]
        health = httpx.get(f"{info['server_url']}/healthz", timeout=10).json()
        assert (health["status"], health["broker"]["ok"], health["database"]["ok"]) == (
            "ok",
            True,
            True,
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        wait_for(lambda: not ({"planner", "policy", "tool"} & roles()), what="workers gone")
        with pytest.raises(httpx.ConnectError):  # the server stopped with the stack
            httpx.get(f"{info['server_url']}/healthz", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_run_start_with_the_broker_down_exits_3_and_names_the_recorded_run(
    tmp_path: Path, services, engine
):
    """The run is recorded before its first message is published: with the broker unreachable
    the start fails fast with exit 3 and the run's id, and the run is in the state the
    reconciler's stalled-run sweep re-publishes."""
    import socket
    import time

    from sqlalchemy import text

    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import sweep

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"WARRANT_BROKER_URL": f"redis://127.0.0.1:{port}/0"}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")])))

    t0 = time.monotonic()
    out = warrant("run", "start", str(spec), "--json", env=env)
    assert out.returncode == 3, out.stderr
    assert time.monotonic() - t0 < 20  # fails fast (interpreter start-up included)
    assert "Traceback" not in out.stderr
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "BROKER_UNAVAILABLE"
    run_id = error["run_id"]
    assert run_id in error["message"] and "broker is back" in error["message"]
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT status, phase, version FROM runs WHERE id = :id"), {"id": run_id}
        ).one()
    assert tuple(row) == ("running", "planning", 1)

    human = warrant("run", "start", str(spec), env=env)
    assert human.returncode == 3
    assert len(human.stderr.strip().splitlines()) == 1, human.stderr
    assert "BROKER_UNAVAILABLE" in human.stderr and "broker is back" in human.stderr

    # the stalled-run sweep starts it: its first planner message is published at version 1
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET updated_at = now() - interval '1 hour' WHERE id = :id"),
            {"id": run_id},
        )
    publisher = RecordingPublisher()
    sweep(context_for(engine, publisher=publisher))
    assert ("planner", {"run_id": run_id, "version": 1}) in publisher.sent


def test_run_list_reads_what_the_client_reads_without_importing_sqlalchemy(client, engine):
    """``run list`` takes one psycopg query (``warrant.ledger.run_listing``), not the
    client's ORM read: the same rows, the same keys, and no SQLAlchemy to import."""
    for _ in range(3):
        client.start_run(sc.spec([sc.search("p1"), sc.final("x", "tool-1")]), publish=False)
    for args in ((), ("--status", "running")):
        listed = json.loads(warrant("run", "list", "--limit", "5", *args, "--json").stdout)
        status = args[1] if args else None
        assert listed == [r.to_dict() for r in client.list_runs(limit=5, status=status)]
        assert listed and all(set(r) == set(listed[0]) for r in listed)
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "warrant.runner.cli", "run", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert timed.returncode == 0, timed.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in timed.stderr.splitlines()}
    assert not {m for m in imported if m.split(".")[0] in ("sqlalchemy", "celery", "kombu")}


def test_tools_disable_and_enable_print_the_change_as_json(engine):
    out = warrant("tools", "disable", "pay_switched", "--reason", "cli test", "--by", "ops",
                  "--json")  # fmt: skip
    try:
        assert out.returncode == 0, out.stderr
        disabled = json.loads(out.stdout)
        assert {k: disabled[k] for k in ("tool", "disabled", "changed", "event", "by")} == {
            "tool": "pay_switched",
            "disabled": True,
            "changed": True,
            "event": "tool.disabled",
            "by": "ops",
        }
        assert disabled["reason"] == "cli test" and disabled["at"]
        human = warrant("tools", "disable", "pay_switched", "--by", "ops")
        assert human.returncode == 0 and "already" in human.stdout, human.stdout
    finally:
        enabled = warrant("tools", "enable", "pay_switched", "--by", "ops", "--json")
    assert enabled.returncode == 0, enabled.stderr
    assert (json.loads(enabled.stdout)["disabled"], json.loads(enabled.stdout)["changed"]) == (
        False,
        True,
    )
    bad = warrant("tools", "disable", "x" * 201, "--by", "ops", "--json")
    assert (bad.returncode, json.loads(bad.stdout)["error"]["code"]) == (2, "INVALID_REQUEST")
