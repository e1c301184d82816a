"""Reliability under faults (issue 16): broker restarts, a role that dies, embedded servers that
must stop, and a stray server left by a killed ``up``.

The Redis here is this module's own ``redis-server`` on a free port (never the shared one), so
it can be restarted at will.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
import redis
from warrant_demo import scenarios as sc

from tests.conftest import wait_for
from warrant.runner.errors import ServiceUnavailable
from warrant.runner.stack.embedded import EmbeddedServices, reap_stray_servers
from warrant.runner.stack.local import Stack
from warrant.runner.stack.roles import role_of_node
from warrant.runner.stack.supervisor import Backoff

ROLES = ("planner", "policy", "tool")


def test_backoff_doubles_to_the_cap_and_resets_after_a_stable_run():
    b = Backoff(first=1.0, cap=30.0, stable_after=60.0)
    assert [b.delay("tool", uptime=0.5) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert b.delay("planner", uptime=0.5) == 1  # per role
    assert b.delay("tool", uptime=61.0) == 1  # it had been up a while: start again
    assert b.delay("tool", uptime=0.5) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    """A throw-away ``redis-server`` (no persistence) on its own port."""

    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        wait_for(self._answers, timeout=10, what=f"redis-server on {self.port}")
        return self

    def _answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.2).ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()


def _roles_answering(app: Any) -> set[str]:
    try:
        replies = app.control.ping(timeout=0.5) or []
    except Exception:  # the broker is restarting
        return set()
    return {role_of_node(name) for reply in replies for name in reply}


@dataclass
class OwnStack:
    redis: RedisServer
    stack: Stack
    app: Any
    database_url: str

    @property
    def workers(self) -> Any:
        assert self.stack.workers is not None
        return self.stack.workers


@pytest.fixture(scope="module")
def own_stack(services: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    """planner, policy and tool workers (the ``up`` code path) on this module's own Redis."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    from warrant.broker.app import make_app
    from warrant.runner.settings import WarrantSettings

    redis = RedisServer(_free_port()).start()
    data = tmp_path_factory.mktemp("faults")
    settings = WarrantSettings(
        broker_url=redis.url, database_url=services.database_url, data_dir=data
    )
    stack = Stack(settings, loglevel="info")
    stack.broker_url, stack.database_url = redis.url, services.database_url
    app = make_app(settings)
    try:
        stack.start_workers(ROLES, with_beat=False)
        wait_for(lambda: set(ROLES) <= _roles_answering(app), timeout=60, what="roles ready")
        yield OwnStack(redis, stack, app, services.database_url)
    finally:
        stack.stop()
        redis.stop()
        app.close()


@pytest.mark.services
@pytest.mark.slow
def test_workers_survive_redis_restarts_and_a_run_completes(own_stack: OwnStack):
    from warrant.broker.publish import Publisher
    from warrant.ledger.db import engine_for
    from warrant.runner.client.api import Client

    pids = own_stack.workers.pids()
    for _ in range(4):
        own_stack.redis.restart()
        wait_for(
            lambda: set(ROLES) <= _roles_answering(own_stack.app),
            timeout=60,
            what="every role answering after a Redis restart",
        )
    assert all(own_stack.workers.alive().values())
    assert own_stack.workers.pids() == pids  # the same processes: none exited and came back
    assert own_stack.workers.supervise() == []

    client = Client(engine=engine_for(own_stack.database_url), publisher=Publisher(own_stack.app))
    run_id = client.start_run(sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")]))
    info = client.wait(run_id, timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")


@pytest.mark.services
@pytest.mark.slow
def test_a_killed_role_is_reported_and_restarted(own_stack: OwnStack):
    workers = own_stack.workers
    old = workers.pids()["policy"]
    os.killpg(old, signal.SIGKILL)
    exits: list[Any] = []

    def restarted() -> bool:
        exits.extend(workers.supervise())
        return workers.pids()["policy"] != old and workers.alive()["policy"]

    wait_for(restarted, timeout=20, what="policy restarted")
    assert [(e.label, e.pid, e.how) for e in exits] == [("policy", old, "killed by SIGKILL")]
    assert "restarting in 1s" in exits[0].describe() and exits[0].last_lines
    wait_for(
        lambda: "policy" in _roles_answering(own_stack.app) and not workers.supervise(),
        timeout=60,
        what="the new policy process answering",
    )
    assert all(workers.alive().values())


# --- embedded servers --------------------------------------------------------------------------


def processes_in(folder: Path) -> list[psutil.Process]:
    """Server processes working in ``folder`` (redis-server and postgres chdir to their data)."""
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if Path(proc.cwd()).is_relative_to(folder) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


HOLD_SERVERS = """
import sys, time
from pathlib import Path
from warrant.runner.stack.embedded import EmbeddedServices
emb = EmbeddedServices(Path(sys.argv[1])).start()
emb.write_services_file(Path(sys.argv[1]) / "services.json")
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_stray_left_by_a_killed_owner_is_stopped_at_the_next_start(tmp_path: Path):
    data = tmp_path / "data"
    env = {**os.environ, "WARRANT_BROKER_URL": "", "WARRANT_DATABASE_URL": ""}
    owner = subprocess.Popen(
        [sys.executable, "-c", HOLD_SERVERS, str(data)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == b"ready"
        servers = json.loads((data / "services.json").read_text())["servers"]
        assert set(servers) == {"redis", "postgres"}
        with pytest.raises(ServiceUnavailable) as refused:  # its owner is alive: hands off
            reap_stray_servers(data)
        assert refused.value.code == "STACK_ALREADY_RUNNING"
        owner.kill()  # SIGKILL: nothing of the owner's runs
        owner.wait(10)
        assert {p.pid for p in processes_in(data)} >= {s["pid"] for s in servers.values()}

        emb = EmbeddedServices(data).start()
        try:
            assert sorted(emb.reaped) == sorted(
                f"{name} (pid {s['pid']})" for name, s in servers.items()
            )
            assert not any(psutil.pid_exists(s["pid"]) for s in servers.values())
            assert set(emb.pids().values()) == {p.pid for p in processes_in(data)} & set(
                emb.pids().values()
            )
        finally:
            emb.stop()
        wait_for(lambda: not processes_in(data), timeout=20, what="servers gone")
    finally:
        if owner.poll() is None:
            owner.kill()
        if owner.stdout is not None:  # else a ResourceWarning at some later test's GC
            owner.stdout.close()
        for proc in processes_in(data):
            proc.kill()


@pytest.mark.slow
def test_the_embedded_servers_keep_their_address_across_restarts_and_deaths(tmp_path: Path):
    """Each start used to put Redis on a new random socket: a ``warrant serve`` or an extra
    worker started outside ``up`` kept the old one for ever. A killed server was left dead."""
    data = tmp_path / "data"
    first = EmbeddedServices(data).start()
    urls = (first.broker_url, first.database_url)
    first.stop()
    emb = EmbeddedServices(data).start()  # `warrant down`, then `warrant up`
    try:
        assert (emb.broker_url, emb.database_url) == urls
        for name in ("redis", "postgres"):
            dead = emb.pids()[name]
            os.kill(dead, signal.SIGKILL)
            wait_for(lambda pid=dead: not psutil.pid_exists(pid) or _zombie(pid), timeout=20)
            assert emb.revive() == [name]
            assert emb.pids()[name] != dead and (emb.broker_url, emb.database_url) == urls
        assert emb.revive() == []  # both alive: nothing to do
        with redis.Redis.from_url(emb.broker_url.replace("redis+socket", "unix")) as r:
            assert r.ping()
        with psycopg.connect(emb.database_url, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        emb.stop()
    wait_for(lambda: not processes_in(data), timeout=20, what="servers gone")


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_a_late_ack_on_a_channel_its_connection_left_behind_reaches_redis(tmp_path: Path):
    """The worker's exit on a Redis restart, reproduced without Celery: the connection is closed
    after the server went away, one channel stays attached to the detached transport
    (``transport.client is None``) with no synchronous pool, and a late ack then needs one.
    Stock kombu raises ``AttributeError: 'NoneType' object has no attribute 'hostname'``."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    from kombu import Connection, Exchange, Queue

    from warrant.broker._redis_transport import TRANSPORT

    server = RedisServer(_free_port()).start()
    queue = Queue("q", Exchange("q"), "q")
    try:
        with Connection(server.url, transport=TRANSPORT) as pub:
            pub.Producer().publish(
                {"x": 1}, exchange=queue.exchange, routing_key="q", declare=[queue]
            )
        conn = Connection(server.url, transport=TRANSPORT)
        got: list[Any] = []
        conn.Consumer([queue], callbacks=[lambda _b, m: got.append(m)], accept=["json"]).consume()
        conn.drain_events(timeout=5)
        (message,) = got
        server.stop()
        with pytest.raises(conn.connection_errors):
            conn.drain_events(timeout=1)
        conn.close()  # what Celery does on a connection loss (the channel's close fails)
        channel = message.channel
        assert channel.connection is not None and channel.connection.client is None
        channel._pool = None  # as kombu leaves it: built lazily, dropped in _disconnect_pools
        server.start()
        message.ack()
        import redis

        assert not redis.Redis(port=server.port).hlen("unacked")
    finally:
        server.stop()


_OWNER = """
import sys, time
from warrant.runner.stack.supervisor import WorkerProcesses
procs = WorkerProcesses(env={})
procs.spawn("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"])
print(procs.pids()["sleeper"], flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_workers_of_a_killed_owner_stop_with_it():
    """A SIGKILLed ``warrant up`` cannot stop its workers: the kernel does (PDEATHSIG)."""
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    child = int(owner.stdout.readline())
    assert psutil.pid_exists(child)
    owner.kill()
    owner.wait(10)
    owner.stdout.close()

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, timeout=10, what="the orphaned worker stopped")
