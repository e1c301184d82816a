"""Plug-in tools and planners through the real pipeline: a tool worker that lacks a version,
deps closed at shutdown, a plug-in planner kind, and ``warrant tools check``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from tests import facts
from tests.conftest import DEMO_PLUGIN, WorkerProcess, wait_for
from warrant.ledger.db import session_scope
from warrant.ledger.models import Observation, Proposal, WorkerRegistration
from warrant.ledger.workers import (
    CACHE_S,
    FORGOTTEN_AFTER_S,
    register_worker,
    unregister_worker,
)

pytestmark = [pytest.mark.services, pytest.mark.slow]

ECHO_GRANT = {"capability": "echo:read", "resource_scope": "echo"}


@pytest.fixture(scope="module")
def echo_worker(engine, worker, tmp_path_factory) -> Iterator[tuple[WorkerProcess, Any]]:
    """A tool worker deployed before echo 2: its registry has echo 1 only."""
    logs = tmp_path_factory.mktemp("echo")
    closed = logs / "closed"
    proc = WorkerProcess(
        ["tool.echo"],
        name="echo",
        concurrency=1,
        log=logs / "echo.log",
        env={
            "WARRANT_TOOLS": f"{DEMO_PLUGIN},tests.plugin_fixtures:echo_v1",
            "WARRANT_TEST_DEPS_CLOSED_FILE": str(closed),
        },
    )
    proc.wait_ready()
    registered = wait_for(lambda: _registration(engine, "echo@"), what="echo registration")
    # the policy workers re-read registrations at most CACHE_S after a change
    wait_for(lambda: time.time() > registered.started_at.timestamp() + CACHE_S, timeout=30)
    try:
        yield proc, closed
    finally:
        proc.stop()


def _registration(engine, prefix: str) -> Any:
    with session_scope(engine) as s:
        return s.scalars(
            select(WorkerRegistration).where(WorkerRegistration.node.startswith(prefix))
        ).first()


def _spec(outputs: list[Any]) -> dict[str, Any]:
    return {
        "goal": "echo things",
        "subject": "plugin-user",
        "planner": {"kind": "fixture", "outputs": outputs},
        "grants": [ECHO_GRANT],
    }


def _echo(version: str, text: str, pid: str) -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "echo",
        "tool_version": version,
        "arguments": {"text": text},
        "reason_summary": "echo",
        "source_observation_ids": ["user-1"],
    }


def test_a_tool_version_the_tool_workers_lack_is_refused_naming_the_role(
    engine, client, echo_worker
):
    outputs = [
        _echo("2", "new", "p1"),
        _echo("1", "old", "p2"),
        {"kind": "final", "answer": "old echoed", "citations": ["tool-2"]},
    ]
    info = client.wait(client.start_run(_spec(outputs)), timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    with session_scope(engine) as s:
        codes = s.execute(
            select(Proposal.proposal_id, Proposal.rejection_code)
            .where(Proposal.run_id == info.run_id)
            .order_by(Proposal.step)
        ).all()
        refusal = s.scalars(
            select(Observation).where(
                Observation.run_id == info.run_id, Observation.observation_id == "policy-1"
            )
        ).one()
        result = s.scalars(
            select(Observation).where(
                Observation.run_id == info.run_id, Observation.observation_id == "tool-2"
            )
        ).one()
    assert [tuple(c) for c in codes][:2] == [("p1", "TOOL_NOT_DEPLOYED"), ("p2", None)]
    assert "role tool lacks echo@2" in refusal.content["message"]
    assert "echo@" in refusal.content["message"]  # names the worker node
    assert result.content["output"]["deps"] == "echo-deps"  # the plug-in's own deps
    rejected = facts.events(engine, info.run_id, "proposal.rejected")
    assert rejected[0].details["code"] == "TOOL_NOT_DEPLOYED"


def test_a_plugin_planner_kind_runs_a_run(client, echo_worker):
    spec = _spec([])
    spec["planner"] = {"kind": "script", "settings": {"texts": ["one", "two"]}}
    info = client.wait(client.start_run(spec), timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert info.tool_calls == 2


def test_tools_check_reports_the_roles_that_disagree(echo_worker):
    out = subprocess.run(
        [sys.executable, "-m", "warrant.runner.cli", "tools", "check", "--json"],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=60,
    )
    report = json.loads(out.stdout)
    assert out.returncode == 1 and not report["ok"]
    lacking = {
        p.split(" ")[0]: p.split(" lacks ", 1)[1].split(", ")
        for p in report["disagreements"]
        if " lacks " in p
    }
    assert any(node.startswith("echo@") and "echo@2" in tools for node, tools in lacking.items())


def test_a_worker_closes_its_deps_and_its_registration_at_shutdown(engine, echo_worker):
    proc, closed = echo_worker
    # the deps were built by the earlier tests' calls; stopping the worker closes them
    proc.stop()
    wait_for(lambda: closed.exists() and "closed" in closed.read_text(), what="deps closed")
    assert _registration(engine, "echo@") is None
    proc.restart()


def test_a_heartbeat_inserts_a_registration_the_start_could_not_record(engine):
    """A worker started while the ledger was down has no row; its next heartbeat inserts the
    whole registration (it used to update nothing, and ``tools check`` never saw the worker)."""
    process = f"heartbeat-{os.getpid()}-{time.time_ns()}"
    values = {
        "process": process,
        "node": f"late@{process}",
        "roles": ["tool"],
        "queues": ["tool.echo"],
        "fingerprint": "f" * 16,
        "tools": ["echo@1"],
        "pid": os.getpid(),
    }
    assert _registration(engine, f"late@{process}") is None
    register_worker(engine, **values, refresh=True)
    first = _registration(engine, f"late@{process}")
    assert first is not None and first.tools == ["echo@1"] and first.queues == ["tool.echo"]
    register_worker(engine, **values, refresh=True)
    again = _registration(engine, f"late@{process}")
    assert again.started_at == first.started_at and again.seen_at >= first.seen_at
    unregister_worker(engine, process)


def test_a_workers_start_forgets_the_rows_of_workers_dead_for_a_day(engine):
    """Dead workers' rows used to stay in ``worker_registrations`` for ever."""
    stamp = f"{os.getpid()}-{time.time_ns()}"
    row = {
        "roles": ["tool"],
        "queues": ["tool.echo"],
        "fingerprint": "f" * 16,
        "tools": ["echo@1"],
        "pid": os.getpid(),
    }
    register_worker(engine, process=f"dead-{stamp}", node=f"dead@{stamp}", **row)
    register_worker(engine, process=f"quiet-{stamp}", node=f"quiet@{stamp}", **row)
    with session_scope(engine) as s:
        for process, age in ((f"dead-{stamp}", FORGOTTEN_AFTER_S + 60), (f"quiet-{stamp}", 600)):
            s.execute(
                update(WorkerRegistration)
                .where(WorkerRegistration.process == process)
                .values(seen_at=func.now() - timedelta(seconds=age))
            )
    register_worker(engine, process=f"new-{stamp}", node=f"new@{stamp}", **row)
    assert _registration(engine, f"dead@{stamp}") is None
    assert _registration(engine, f"quiet@{stamp}") is not None  # dead a while: still shown
    for process in (f"quiet-{stamp}", f"new-{stamp}"):
        unregister_worker(engine, process)
