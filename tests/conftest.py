"""Fixtures: real PostgreSQL and Redis (or RabbitMQ), a real Celery worker subprocess.

The broker's test database/vhost is flushed before and after the session; the ledger schema
is dropped and migrated from scratch once per session.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services import (
    DEFAULT_TEST_BROKER,
    DEFAULT_TEST_VHOST,
    Services,
    discover,
    ensure_vhost,
    use_examples_in_place,
)
from warrant.runner.stack.roles import celery_worker_command
from warrant.runner.stack.supervisor import stop_with_parent
from warrant.tools._plugins import DEMO_PLUGIN

use_examples_in_place()  # before any test module imports warrant_demo (a plain `.[dev]` install)

#: The tool plug-ins of the test deployment (the pytest process and the pipeline worker).
TEST_TOOL_PLUGINS = (
    DEMO_PLUGIN,
    "tests.plugin_fixtures:echo_v2",
    "tests.typed_tool:plugin",
    "tests.adversary:plugin",
    "tests.refusing_tool:plugin",
    "tests.limited_tool:plugin",
    "tests.paid_tool:plugin",
    "tests.approvals_tool:plugin",
    "tests.precondition_tool:plugin",
    "tests.booking_tool:plugin",
    "tests.stopping_tool:plugin",
    "tests.permission_tool:plugin",
    "tests.effect_tool:plugin",
    "tests.slow_tool:plugin",
)

#: Relaxed by the test deployment (``WARRANT_RELAX_CONFIRMATION``): the demo's refunds only.
RELAXED_IN_TESTS = "issue_refund,refund_async"

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SERVICES: Services | None = None


#: The model API key the workers read (by variable name) in the LLM planner tests.
MODEL_KEY_ENV = "WARRANT_TEST_MODEL_KEY"
MODEL_KEY = "sk-test-" + os.urandom(8).hex()
#: The test deployment's price table (``WARRANT_MODEL_PRICES``): one priced model.
MODEL_PRICES = '{"priced-model": {"prompt_per_1k": 0.5, "completion_per_1k": 1.0}}'


#: RabbitMQ for ``--broker amqp`` unless ``WARRANT_TEST_AMQP_URL`` names another.
DEFAULT_TEST_AMQP = f"amqp://guest:guest@127.0.0.1:5672/{DEFAULT_TEST_VHOST}"

#: Fixtures backed by the real Redis/RabbitMQ and PostgreSQL. A test whose fixture closure
#: holds any of them is marked ``services`` (``pytest_collection_modifyitems``), so
#: ``-m "not services"`` never collects it. Every one of them requests ``services`` (directly
#: or through another), as must any new service-backed fixture, in conftest or a test module
#: (``own_stack``, ``weather_worker``, ``racers``, ``echo_worker``, MCP ``stack``, ...).
SERVICE_FIXTURES = frozenset(
    {
        "services",
        "engine",
        "client",
        "worker",
        "draft_worker",
        "reconciler_worker",
        "demo",
        "run_to_end",
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--broker",
        choices=("redis", "amqp"),
        default="redis",
        help="the session's broker: redis (WARRANT_TEST_BROKER_URL or "
        f"{DEFAULT_TEST_BROKER}, default) or amqp (WARRANT_TEST_AMQP_URL or {DEFAULT_TEST_AMQP})",
    )


def _select_broker(config: pytest.Config) -> None:
    """Name the session's broker before ``discover()`` and before any test module imports the
    Celery app (collection comes after ``pytest_configure``; this conftest imports neither the
    app nor settings instances)."""
    if config.getoption("broker") == "amqp":
        # Named explicitly, so ``discover()`` never swaps in an embedded Redis.
        amqp = os.environ.get("WARRANT_TEST_AMQP_URL")
        if not amqp:  # the checkout's own vhost, made if missing
            problem = ensure_vhost(DEFAULT_TEST_VHOST)
            amqp = DEFAULT_TEST_AMQP if problem is None else "amqp://guest:guest@127.0.0.1:5672//"
            if problem is not None:
                said = f"RabbitMQ vhost {DEFAULT_TEST_VHOST} not made ({problem}): using /"
                print(said, file=sys.stderr)
        os.environ["WARRANT_TEST_BROKER_URL"] = amqp


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout reads its setting
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("timeout", None) is None and not os.environ.get("PYTEST_TIMEOUT"):
        config.option.timeout = float(config.getini("timeout") or 180) * TIME_FACTOR
    global SERVICES
    _select_broker(config)
    os.environ[MODEL_KEY_ENV] = MODEL_KEY  # inherited by the worker subprocesses
    # The price table: producers check a run's max_cost against it at start, planners charge by it
    os.environ["WARRANT_MODEL_PRICES"] = MODEL_PRICES
    # The demo plug-in is off unless named; the echo plug-in (version 2) and a plug-in planner
    # kind are what the plug-in pipeline tests deploy (tests/plugin_fixtures.py).
    os.environ["WARRANT_TOOLS"] = ",".join(TEST_TOOL_PLUGINS)
    # The demo's refund runs unattended in the suite's scenarios; every other irreversible or
    # compensatable write (the demo's notice too) needs a confirmation or a pre-approval.
    os.environ["WARRANT_RELAX_CONFIRMATION"] = RELAXED_IN_TESTS
    os.environ["WARRANT_PLANNERS"] = "tests.plugin_fixtures:script_planner"
    SERVICES = discover()
    if SERVICES.ok:
        os.environ["WARRANT_BROKER_URL"] = SERVICES.broker_url or ""
        os.environ["WARRANT_DATABASE_URL"] = SERVICES.database_url or ""
    elif IN_CI:
        pytest.exit(f"CI=true and services are unreachable: {SERVICES.problem}", returncode=3)


def needs_services(item: pytest.Item) -> bool:
    """Whether the test's fixture closure (``item.fixturenames``: the fixtures it requests,
    autouse ones and everything they request in turn) holds a service-backed fixture."""
    return not SERVICE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


#: Unit tests: the pure core and the packaging, no service (``tests/integration`` has the rest).
UNIT_TESTS = Path(__file__).resolve().parent / "unit"


@pytest.hookimpl(tryfirst=True)  # before the ``-m``/``-k`` deselection of the mark plug-in
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not needs_services(item):
            continue
        if UNIT_TESTS in Path(item.path).resolve().parents:
            raise pytest.UsageError(
                f"{item.nodeid} uses a service fixture: it belongs in tests/integration"
            )
        if item.get_closest_marker("services") is None:
            item.add_marker(pytest.mark.services)


#: Set by ``tests/unit/test_markers.py``: a file to write each selected test's id and fixtures to.
COLLECTED_REPORT_ENV = "WARRANT_TEST_COLLECTED_REPORT"


def pytest_collection_finish(session: pytest.Session) -> None:
    path = os.environ.get(COLLECTED_REPORT_ENV)
    if path:
        report = [
            {
                "nodeid": item.nodeid,
                "fixtures": sorted(getattr(item, "fixturenames", ())),
                "markers": sorted({m.name for m in item.iter_markers()}),
            }
            for item in session.items
        ]
        Path(path).write_text(json.dumps(report))


def pytest_unconfigure(config: pytest.Config) -> None:
    if SERVICES and SERVICES.embedded is not None:
        SERVICES.embedded.stop()  # type: ignore[attr-defined]


def _flush_broker(url: str) -> None:
    if url.startswith(("redis", "rediss")):
        import redis

        if url.startswith("redis+socket://"):
            client = redis.Redis(unix_socket_path=url[len("redis+socket://") :])
        else:
            client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()
    else:
        from warrant.broker.app import app

        with app.connection_for_write() as conn:
            for q in app.conf.task_queues:
                with contextlib.suppress(Exception):  # a queue not declared yet
                    q.bind(conn.default_channel).purge()


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    assert SERVICES is not None
    if not SERVICES.ok:
        pytest.skip(f"services unavailable: {SERVICES.problem}")
    from sqlalchemy import text

    from warrant.ledger.db import engine_for
    from warrant.ledger.migrate import upgrade

    engine = engine_for(SERVICES.database_url or "")
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    upgrade(SERVICES.database_url or "")
    _flush_broker(SERVICES.broker_url or "")
    yield SERVICES
    _flush_broker(SERVICES.broker_url or "")


@pytest.fixture(scope="session")
def engine(services: Services) -> Any:
    from warrant.ledger.db import engine_for

    return engine_for(services.database_url or "")


#: Every worker subprocess the session started (see ``stages_to_myself``).
LIVE_WORKERS: list[WorkerProcess] = []
#: How many of a worker's last log lines a failed test's report shows.
WORKER_LOG_TAIL = 60


class WorkerProcess:
    """A real ``celery worker`` subprocess (prefork unless ``pool``) consuming the queues."""

    def __init__(
        self,
        queues: list[str],
        *,
        name: str,
        concurrency: int = 2,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        pool: str = "prefork",
    ) -> None:
        self.name = name
        self.log = log
        self.command = celery_worker_command(
            "warrant.broker.app",
            queues,
            node=f"{name}@%h",
            concurrency=concurrency,
            loglevel="info",
            events=False,
            pool=pool,
        )
        self.queues = list(queues)
        self.env = {**os.environ, **(env or {})}
        self.proc = self._spawn()
        LIVE_WORKERS.append(self)

    def _spawn(self) -> subprocess.Popen[bytes]:
        # A killed test session must not leave workers consuming the next session's queues:
        # the kernel stops them with their parent (as ``warrant up`` does for its own).
        if self.log is None:
            return subprocess.Popen(
                self.command,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=stop_with_parent,
            )
        with open(self.log, "ab") as out:  # the child keeps its own descriptor
            return subprocess.Popen(
                self.command,
                env=self.env,
                stdout=out,
                stderr=out,
                start_new_session=True,
                preexec_fn=stop_with_parent,
            )

    def kill_all(self) -> None:
        """SIGKILL the main process and its pool: nothing is acknowledged or requeued."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def restart(self) -> None:
        self.proc = self._spawn()
        self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        from warrant.broker.app import app

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited: see {self.log}")
            replies = app.control.ping(timeout=0.5) or []
            if any(n.startswith(f"{self.name}@") for r in replies for n in r):
                return
        raise TimeoutError(f"worker {self.name} not ready in {timeout}s")

    @contextlib.contextmanager
    def serving(self) -> Iterator[WorkerProcess]:
        """Ready on entry; stopped on exit (its log shown if WARRANT_TEST_SHOW_WORKER_LOG)."""
        try:
            self.wait_ready()
            yield self
        finally:
            self.stop()
            if self.log is not None and os.environ.get("WARRANT_TEST_SHOW_WORKER_LOG"):
                sys.stderr.write(self.log.read_text())

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@pytest.fixture(scope="session")
def worker(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    from warrant.broker.app import app

    queues = [
        q.name
        for q in app.conf.task_queues
        if q.name != "reconciler" and q.name not in (*DRAFT_QUEUES, *OWN_WORKER_QUEUES)
    ]
    logs = tmp_path_factory.mktemp("logs")
    log = logs / "worker.log"
    prices = {"WARRANT_MODEL_PRICES": MODEL_PRICES}
    proc = WorkerProcess(queues, name="pipeline", concurrency=2, log=log, env=prices)
    with proc.serving():
        yield proc


@contextlib.contextmanager
def queues_to_myself(queues: Iterable[str]) -> Iterator[None]:
    """Every running worker that consumes one of ``queues`` now (asked over the broker: a
    worker may have been given a queue since it started) stops consuming it for the block,
    and consumes it again afterwards."""
    from warrant.broker.app import app

    wanted = set(queues)
    active = app.control.inspect(timeout=1.0).active_queues() or {}
    taken = [(node, q["name"]) for node, qs in active.items() for q in qs if q["name"] in wanted]
    for node, queue in taken:
        app.control.cancel_consumer(queue, destination=[node], reply=True)
    try:
        yield
    finally:
        for node, queue in taken:
            app.control.add_consumer(queue, destination=[node], reply=True)


@pytest.fixture(scope="module")
def stages_to_myself() -> Iterator[None]:
    """For a module whose own workers have a registry the session's workers lack (MCP tools):
    stop every running worker that consumes the planner, policy or reconciler queue, so none of
    them takes the module's runs, and start them again afterwards; any other worker consuming
    one of them now stops consuming it meanwhile."""
    shared = {"planner", "policy", "reconciler"}
    paused = [w for w in LIVE_WORKERS if w.proc.poll() is None and shared & set(w.queues)]
    for w in paused:
        w.stop()
    with queues_to_myself(shared):
        yield
    for w in paused:
        w.restart()


DRAFT_QUEUES = ("tool.save_draft", "tool.issue_refund", "tool.send_notice")
#: The demo's long-running and batch tools: their tests start their own tool worker.
JOB_QUEUES = ("tool.refund_async", "tool.payout_batch")
#: Tool queues served only by a test's own worker (never by the session's pipeline worker).
OWN_WORKER_QUEUES = (
    "tool.echo",
    "tool.read_document",
    "tool.get_weather",
    "tool.send_message",
    "tool.held_call",
    "tool.slow_read",
    *JOB_QUEUES,
)


@pytest.fixture(scope="session")
def draft_worker(
    services: Services, worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """A separate tool worker for the demo write tools, so tests can SIGKILL its pool."""
    log = tmp_path_factory.mktemp("logs") / "drafts.log"
    proc = WorkerProcess(list(DRAFT_QUEUES), name="drafts", concurrency=1, log=log)
    with proc.serving():
        yield proc


#: Reconciler settings for tests: short stall and lease windows.
RECONCILER_ENV = {
    "WARRANT_STALL_AFTER_S": "1",
    "WARRANT_LEASE_MARGIN_S": "0.5",
    "WARRANT_RECONCILE_INTERVAL_S": "0.5",
    "WARRANT_LEASE_HEARTBEAT_S": "0.5",
    "WARRANT_LEASE_HEARTBEAT_TIMEOUT_S": "4",
}


@pytest.fixture(scope="session")
def reconciler_worker(
    services: Services, worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    log = tmp_path_factory.mktemp("logs") / "reconciler.log"
    proc = WorkerProcess(
        ["reconciler"], name="reconciler", concurrency=2, log=log, env=RECONCILER_ENV
    )
    with proc.serving():
        yield proc


@pytest.fixture(scope="session")
def demo(services: Services) -> Any:
    from warrant_demo.service import DemoService

    from warrant.ledger.db import engine_for

    service = DemoService(engine_for(services.database_url or ""))
    service.ensure_schema()
    return service


@pytest.fixture(scope="module")
def live_api(client: Any) -> Iterator[str]:
    """``warrant serve``'s HTTP API over the test client, under uvicorn in a thread: its URL."""
    from tests.integration.test_http_api import LiveServer
    from warrant.runner.server.http import create_app

    with LiveServer(create_app(client=client)) as server:
        yield server.url


@pytest.fixture(scope="module")
def producer_token(client: Any) -> str:
    """A producer's API token (what an agent's process holds), under a name unique to it."""
    from warrant.runner.client.tokens import Tokens

    name = f"agent-{os.urandom(3).hex()}"
    return Tokens(client.engine).create(name, "producer", created_by="tests")[0]


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[Any]:
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="session")
def client(services: Services) -> Any:
    from warrant.broker.app import app
    from warrant.broker.publish import Publisher
    from warrant.ledger.db import engine_for
    from warrant.runner.client.api import Client

    return Client(engine=engine_for(services.database_url or ""), publisher=Publisher(app))


@pytest.fixture
def run_to_end(client: Any, worker: WorkerProcess) -> Callable[..., Any]:
    """Start a run from a spec and wait (with a deadline) until it settles."""

    def go(spec: dict[str, Any], *, timeout: float = 30.0) -> Any:
        run_id = client.start_run(spec)
        info = client.wait(run_id, timeout=timeout)
        assert info.status not in ("running", "cancelling"), f"run did not settle: {info}"
        return info

    return go


def _time_factor() -> float:
    """How much slower than an idle machine this one is: ``WARRANT_TEST_TIME_FACTOR``, else
    measured as the session starts (the load average per core, between 1 and 3). Every
    test's waits and slack scale by it, so a loaded machine is slower, not red."""
    if set_ := os.environ.get("WARRANT_TEST_TIME_FACTOR"):
        return max(1.0, float(set_))
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return round(min(3.0, max(1.0, load)), 2)


#: This session's factor (printed in pytest's header; inherited by nothing else).
TIME_FACTOR = _time_factor()


def slack(seconds: float) -> float:
    """``seconds`` of slack in a test's time bound, scaled by :data:`TIME_FACTOR` (the bound
    under test itself, a timeout the product promises, is not scaled)."""
    return seconds * TIME_FACTOR


def pytest_report_header(config: pytest.Config) -> str:
    return f"warrant: test time factor {TIME_FACTOR:g} (WARRANT_TEST_TIME_FACTOR to set it)"


def wait_for(predicate: Callable[[], Any], *, timeout: float = 20.0, what: str = "") -> Any:
    """Poll ``predicate`` until truthy or fail at the deadline (no sleep-and-hope): ``timeout``
    scaled by :data:`TIME_FACTOR`."""
    timeout *= TIME_FACTOR
    end = time.monotonic() + timeout
    pause = 0.02
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the last lines of every live worker's log (CI keeps
    nothing else of a worker that ran on a clean clone)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    for w in LIVE_WORKERS:
        if w.log is not None and w.log.exists():
            lines = w.log.read_text(errors="replace").splitlines()[-WORKER_LOG_TAIL:]
            report.sections.append((f"worker {w.name} (last lines)", "\n".join(lines)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Collect what the session left unreachable before pytest's own final collection: broker
    connections of session-wide apps and clients (kombu's pools, py-amqp sockets) that nothing
    closes explicitly would otherwise end the run with an unraisable ResourceWarning after
    every test passed. Leaks *during* a test still fail it (warnings are errors)."""
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
