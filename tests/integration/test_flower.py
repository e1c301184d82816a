"""Flower on the project's app: its broker page and its queue-lengths API see our queues, and
a task that recorded a refusal or a failure shows in its own state, not ``SUCCESS``.

Flower builds its broker client from the URL scheme of ``app.connection().as_uri()``; the
project's Redis transport must show up there as ``redis`` (see ``warrant.broker.app``).
On RabbitMQ Flower reads queue lengths from the management API (port 15672).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from warrant_demo import scenarios as sc

from tests import refusing_tool
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_cli_feedback import UNKNOWN_TOOL
from tests.services import Services
from warrant.broker import tasks as task_states
from warrant.broker.queues import TASK_PLANNER, TASK_POLICY, TASK_TOOL
from warrant.runner.stack.supervisor import stop_with_parent

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: A project queue only a test's own worker serves (never the session's pipeline worker).
QUEUE = "tool.echo"
#: Flower 2 answers its HTTP API without authentication only when told to.
API_OPEN = {"FLOWER_UNAUTHENTICATED_API": "true"}


@pytest.fixture(scope="module")
def flower(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``celery flower`` on the test broker; yields its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("flower") / "flower.log"
    command = [sys.executable, "-m", "celery", "-A", "warrant.broker.app", "flower"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*command, f"--port={port}", "--address=127.0.0.1"],
            env={**os.environ, "WARRANT_BROKER_URL": services.broker_url or "", **API_OPEN},
            stdout=log,
            stderr=log,
            preexec_fn=stop_with_parent,
        )
    try:
        wait_for(lambda: _healthy(url, proc, log_path), timeout=30, what="flower")
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


def _healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> bool:
    assert proc.poll() is None, f"flower exited:\n{log.read_text()}"
    try:
        return httpx.get(url + "/healthcheck", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_broker_page(flower: str, services: Services) -> None:
    page = httpx.get(flower + "/broker", timeout=10)
    assert page.status_code == 200, page.text
    assert f"{urlparse(services.broker_url or '').scheme}://" in page.text


def test_queue_lengths(flower: str, services: Services, tmp_path: Path) -> None:
    """A worker's queue is listed with the number of messages waiting in it."""
    _skip_without_rabbitmq_management(services.broker_url or "")
    # Flower lists the queues its workers consume (it keeps them after a worker stops).
    with WorkerProcess([QUEUE], name="flower", concurrency=1, log=tmp_path / "w.log").serving():
        wait_for(lambda: _lengths(flower, refresh=True).get(QUEUE) == 0, what="queue listed")
    try:
        _publish(QUEUE)
        wait_for(lambda: _lengths(flower).get(QUEUE) == 1, what="one message counted")
        assert QUEUE in httpx.get(flower + "/broker", timeout=10).text
    finally:
        _purge(QUEUE)


def test_refusals_and_failures_show_in_their_own_state(flower: str, client: Any, worker) -> None:
    """A tool's refusal, the gate's and a planner step that fails the run: each task shows a
    custom state in Flower's API (its tasks page shows the same), the others ``SUCCESS``."""
    _events_reach(flower)
    plan = [
        refusing_tool.proposal("p1", password="pw-flower"),
        UNKNOWN_TOOL,
        sc.final("no", "tool-1"),  # cites a refusal: the final answer is refused, the run fails
    ]
    grants = [{"capability": refusing_tool.CAPABILITY}]
    run_id = client.start_run(sc.spec(plan, grants=grants, max_refused_finals=0))
    assert client.wait(run_id, timeout=30).stop_reason == "FINAL_CITATION_VALIDATION_FAILED"
    expected = {
        (TASK_TOOL, task_states.TOOL_REJECTED),
        (TASK_POLICY, task_states.PROPOSAL_REJECTED),
        (TASK_PLANNER, task_states.RUN_FAILED),
        (TASK_PLANNER, "SUCCESS"),  # the step that forwarded a proposal
        (TASK_POLICY, "SUCCESS"),  # the gate's accepting the call
    }

    last: list[dict[str, Any]] = []

    def seen() -> list[dict[str, Any]] | None:
        last[:] = [t for t in _tasks(flower) if run_id in (t.get("kwargs") or "")]
        return last if {(t["name"], t["state"]) for t in last} >= expected else None

    try:
        tasks = wait_for(seen, timeout=30, what=f"flower states {sorted(expected)}")
    except AssertionError as exc:
        shown = sorted((t["name"], t["state"], t.get("result")) for t in last)
        raise AssertionError(f"{exc}; flower shows {shown}") from None
    (tool,) = [t for t in tasks if t["name"] == TASK_TOOL]
    assert tool["result"] == repr("rejected:SIGN_IN_REFUSED") and tool["runtime"] is not None
    assert len(tasks) == 6, tasks  # planner x3, policy x2, tool x1: nothing retried
    # Flower's own state filter finds them (as its tasks page does)
    refused = httpx.get(f"{flower}/api/tasks", params={"state": "TOOL_REJECTED"}, timeout=10)
    assert tool["uuid"] in refused.json(), refused.text


def _tasks(flower: str) -> list[dict[str, Any]]:
    reply = httpx.get(f"{flower}/api/tasks", params={"limit": 1000}, timeout=10)
    assert reply.status_code == 200, reply.text
    return list(reply.json().values())


def _events_reach(flower: str) -> None:
    """Wait until Flower has received an event of the session's worker (online or a
    heartbeat): its receiver is bound, so no task event of the test goes out before."""

    def heard() -> bool:
        metrics = httpx.get(f"{flower}/metrics", timeout=10).text.splitlines()
        online = 'flower_worker_online{worker="pipeline@'
        return any(m.startswith(online) and m.endswith(" 1.0") for m in metrics)

    wait_for(heard, timeout=30, what="flower receives worker events")


def _lengths(flower: str, *, refresh: bool = False) -> dict[str, int]:
    if refresh:  # ask the workers again (Flower inspects them on start only)
        httpx.get(flower + "/api/workers", params={"refresh": 1}, timeout=10).raise_for_status()
    reply = httpx.get(flower + "/api/queues/length", timeout=10)
    assert reply.status_code == 200, reply.text
    # RabbitMQ's management API leaves "messages" out until its next statistics round (5 s).
    return {q["name"]: q.get("messages", -1) for q in reply.json()["active_queues"]}


def _skip_without_rabbitmq_management(broker_url: str) -> None:
    url = urlparse(broker_url)
    if url.scheme not in ("amqp", "amqps"):
        return
    api = f"http://{url.hostname or 'localhost'}:15672/api/overview"
    auth = (url.username or "guest", url.password or "guest")
    try:
        reachable = httpx.get(api, auth=auth, timeout=2).status_code == 200
    except httpx.TransportError:
        reachable = False
    if not reachable:
        why = f"Flower counts RabbitMQ queues with its management API: {api} unreachable"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{why} (.ci/run enables the rabbitmq_management plug-in)")
        pytest.skip(why)


def _queue(name: str) -> Any:
    from warrant.broker.app import app

    return next(q for q in app.conf.task_queues if q.name == name)


def _publish(name: str) -> None:
    from warrant.broker.app import app

    queue = _queue(name)
    with app.connection_for_write() as conn, conn.channel() as channel:
        channel.Producer().publish(
            {"probe": "flower"}, exchange=queue.exchange, routing_key=name, declare=[queue]
        )


def _purge(name: str) -> None:
    from warrant.broker.app import app

    with app.connection_for_write() as conn, conn.channel() as channel:
        _queue(name).bind(channel).purge()
