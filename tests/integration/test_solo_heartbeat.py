"""On RabbitMQ, a solo worker negotiates no AMQP heartbeat; a prefork worker keeps warrant's.

A solo worker's task runs on the event loop that would send the heartbeats: a model call longer
than two beats would make RabbitMQ close the connection (``warrant.broker.app``). The
negotiated value is read from RabbitMQ's management API, matched to the worker's own sockets.
Only in the RabbitMQ pass (``make test-rabbitmq``): Redis has no heartbeats.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import psutil
import pytest

from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_flower import _skip_without_rabbitmq_management
from warrant.broker.celery_app import BROKER_HEARTBEAT_S

pytestmark = [pytest.mark.services]


def _heartbeats(broker_url: str, worker: WorkerProcess) -> list[int]:
    """The heartbeat RabbitMQ negotiated on each connection of the worker's main process."""
    url = urlparse(broker_url)
    ports = {
        c.laddr.port
        for c in psutil.Process(worker.proc.pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == (url.port or 5672)
    }
    api = f"http://{url.hostname or 'localhost'}:15672/api/connections"
    auth = (url.username or "guest", url.password or "guest")
    listed = httpx.get(api, auth=auth, timeout=5).json()
    return [c["timeout"] for c in listed if c.get("peer_port") in ports]


def test_a_solo_worker_sends_no_amqp_heartbeat_and_prefork_keeps_its_own(
    services: Any, tmp_path: Path
) -> None:
    broker = services.broker_url or ""
    if urlparse(broker).scheme not in ("amqp", "amqps"):
        pytest.skip("AMQP heartbeats: the RabbitMQ pass (make test-rabbitmq)")
    _skip_without_rabbitmq_management(broker)
    with contextlib.ExitStack() as stack:
        seen = {}
        for pool in ("solo", "prefork"):
            worker = WorkerProcess(
                ["reconciler"],  # idle in this test: nothing is published to it
                name=f"heartbeat-{pool}",
                concurrency=1,
                pool=pool,
                log=tmp_path / f"{pool}.log",
            )
            stack.enter_context(worker.serving())
            seen[pool] = wait_for(
                lambda w=worker: _heartbeats(broker, w),
                timeout=30,
                what=f"the {pool} worker's connections in the management API",
            )
    assert set(seen["solo"]) == {0}, seen
    assert BROKER_HEARTBEAT_S in seen["prefork"], seen
