"""Publishing: a stage message's queue is declared once per broker connection, and again
when the connection's cache of declared entities is empty (kombu's own cache, consulted
without kombu's per-publish copy of the queue)."""

from __future__ import annotations

from typing import Any

import pytest
from kombu import Producer, Queue

from tests.services import Services
from warrant.broker.app import make_app
from warrant.broker.publish import Publisher
from warrant.runner.settings import WarrantSettings

pytestmark = pytest.mark.services


@pytest.fixture
def redis_url(services: Services) -> str:
    url = services.broker_url or ""
    if not url.startswith("redis://"):
        pytest.skip("inspects the queue's binding in Redis")
    return url.rsplit("/", 1)[0] + "/14"  # a database no worker consumes


def test_queue_declared_once_per_connection_and_again_after_a_reconnect(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    declares: list[str] = []
    declare = Queue.declare

    def counted(self: Queue, *args: Any, **kwargs: Any) -> Any:
        declares.append(self.name)
        return declare(self, *args, **kwargs)

    monkeypatch.setattr(Queue, "declare", counted)
    checks: list[Any] = []  # kombu's per-publish look-up (a copy of the queue each time)
    maybe_declare = Producer.maybe_declare

    def checked(self: Producer, entity: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(entity, Queue):  # not the task events' exchange
            checks.append(entity)
        return maybe_declare(self, entity, *args, **kwargs)

    monkeypatch.setattr(Producer, "maybe_declare", checked)
    app = make_app(WarrantSettings(broker_url=redis_url))
    publisher = Publisher(app)
    try:
        for version in (1, 2, 3):
            publisher.policy("run-1", version)
        assert declares == ["policy"]
        assert len(checks) == 1  # the first publish only
        assert r.llen("policy") == 3
        assert _bound(r, "policy")

        # A re-established connection starts with an empty cache of declared entities
        # (kombu clears it on connecting): the queue is declared again, as kombu would.
        publisher._producer().connection.declared_entities.clear()
        publisher.policy("run-1", 4)
        assert declares == ["policy", "policy"]
        assert len(checks) == 2
        assert r.llen("policy") == 4

        publisher.tool(
            run_id="run-1",
            version=5,
            command_id="c-1",
            tool="noop_read",
            soft_time_limit=1,
            time_limit=2,
        )
        assert declares == ["policy", "policy", "tool.noop_read"]
        assert r.llen("tool.noop_read") == 1
    finally:
        r.flushdb()
        app.close()


def _bound(r: Any, queue: str) -> bool:
    """Is ``queue`` bound to the app's default exchange in kombu's Redis routing table?"""
    members = r.smembers("_kombu.binding.planner")  # the default exchange: the default queue's
    return any(m.rsplit(b"\x06\x16", 1)[-1] == queue.encode() for m in members)


def _raw(r: Any, queue: str) -> dict[str, Any]:
    """The oldest message on ``queue``, as kombu stored it, its body decoded."""
    import base64
    import json

    message = json.loads(r.rpop(queue))
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


def _comparable(message: dict[str, Any]) -> dict[str, Any]:
    """A message without what differs between any two messages: its id (also the correlation
    id, and the root id of a message sent outside a task) and its delivery tag."""
    headers = dict(message["headers"])
    properties = dict(message["properties"])
    task_id = headers.pop("id")
    if headers["parent_id"] is None:
        assert headers.pop("root_id") == task_id
    assert properties.pop("correlation_id") == task_id
    properties.pop("delivery_tag")
    return {**message, "headers": headers, "properties": properties}


def _parent_task() -> None:
    """Stands for the stage task that publishes."""


@pytest.mark.parametrize(("events", "in_task"), [(False, False), (True, False), (False, True)])
def test_a_stage_message_is_the_message_celery_send_task_writes(
    redis_url: str, events: bool, in_task: bool
) -> None:
    """The publisher builds and sends messages with Celery's own functions, without
    ``Celery.send_task``'s bookkeeping; the message on the queue must be the same, in a task
    (the calling task is its parent, and its root the root) or outside one."""
    import redis
    from celery._state import _task_stack

    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    app = make_app(WarrantSettings(broker_url=redis_url, task_events=events))
    publisher = Publisher(app)
    parent = app.task(name="test.parent")(_parent_task)
    if in_task:
        parent.push_request(id="parent-1", root_id="root-1", called_directly=False)
        _task_stack.push(parent)
    try:
        kwargs = {"run_id": "run-1", "version": 3, "command_id": "c-1", "tool": "noop_read"}
        publisher.tool(
            run_id="run-1",
            version=3,
            command_id="c-1",
            tool="noop_read",
            soft_time_limit=1.5,
            time_limit=3.0,
        )
        publisher._send_task(
            "warrant.tool.execute",
            "run-1",
            kwargs,
            "tool.noop_read",
            soft_time_limit=1.5,
            time_limit=3.0,
        )
        lean, stock = _raw(r, "tool.noop_read"), _raw(r, "tool.noop_read")
        # send_task also copies the displays, already in the headers, into the message's
        # properties (it passes options it does not know on as properties); nothing reads them.
        for name in ("argsrepr", "kwargsrepr"):
            assert stock["properties"].pop(name) == lean["headers"][name]
        assert _comparable(lean) == _comparable(stock)
        # a tool message is stamped with its run and its command (a merge revokes a branch)
        stamps = {"warrant_run_id": "run-1", "warrant_command_id": "c-1"}
        assert lean["headers"]["stamps"] == stamps
        assert lean["headers"]["timelimit"] == [3.0, 1.5]
        assert lean["body"][1] == kwargs
        if in_task:
            assert (lean["headers"]["parent_id"], lean["headers"]["root_id"]) == (
                "parent-1",
                "root-1",
            )
    finally:
        if in_task:
            _task_stack.pop()
            parent.pop_request()
        r.flushdb()
        app.close()


def test_threads_beyond_the_held_ones_publish_with_a_producer_from_the_pool(
    redis_url: str,
) -> None:
    """A publisher's held producers are bounded per process (each holds a broker connection
    of its own, not one of the app's pool); more threads publish with one from the pool each
    time, and every message goes through."""
    import threading

    import redis

    from warrant.broker.publish import DEFAULT_HELD_PRODUCERS

    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    app = make_app(WarrantSettings(broker_url=redis_url))
    publisher = Publisher(app)
    threads_n = DEFAULT_HELD_PRODUCERS + 4
    held: list[Any] = []
    lock = threading.Lock()
    start = threading.Barrier(threads_n)

    def publish(n: int) -> None:
        start.wait(timeout=10)
        for version in range(3):
            publisher.policy(f"run-{n}", version)
        with lock:
            held.append(publisher._producer())

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(threads_n)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in threads), "a publish never finished"
        assert r.llen("policy") == 3 * threads_n
        producers = [p for p in held if p is not None]
        assert len(producers) == DEFAULT_HELD_PRODUCERS
        assert len({id(p.connection) for p in producers}) == DEFAULT_HELD_PRODUCERS
    finally:
        r.flushdb()
        app.close()


def test_a_thread_that_ends_closes_its_producer_and_frees_its_slot(redis_url: str) -> None:
    """Short-lived threads (an executor's, the MCP gateway's) publish once each: each holds a
    producer of its own, closed when the thread ends, so its slot serves the next thread and
    no broker connection is left open."""
    import threading

    import redis

    from warrant.broker.publish import DEFAULT_HELD_PRODUCERS

    r = redis.Redis.from_url(redis_url)
    r.flushdb()
    app = make_app(WarrantSettings(broker_url=redis_url))
    publisher = Publisher(app)
    connections: list[Any] = []

    def publish_once() -> None:
        publisher.policy("run-short", 1)
        producer = publisher._producer()
        connections.append(producer.connection if producer is not None else None)

    try:
        for _ in range(DEFAULT_HELD_PRODUCERS * 3):
            thread = threading.Thread(target=publish_once)
            thread.start()
            thread.join(timeout=30)
        assert r.llen("policy") == DEFAULT_HELD_PRODUCERS * 3
        assert None not in connections  # every thread held one: the slots came back
        assert not any(c.connected for c in connections)  # closed as each thread ended
    finally:
        r.flushdb()
        app.close()


def test_a_publish_that_fails_after_its_commit_is_a_warning_not_a_stage_failure(
    engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The planner's step is committed; its message cannot be published (no broker). The
    stage ends normally and the log says the stalled-run sweep re-publishes the run."""
    import logging
    import socket

    from warrant_demo import scenarios as sc

    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.runner.client.api import Client
    from warrant.runner.errors import BrokerUnavailable

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = Publisher.fail_fast(make_app(WarrantSettings(broker_url=f"redis://127.0.0.1:{port}/0")))
    client = Client(engine=engine, publisher=down)
    with pytest.raises(BrokerUnavailable) as raised:
        client.start_run(sc.spec([sc.search("p1"), sc.final("x", "tool-1")]))
    run_id = raised.value.run_id
    assert client.get_run(run_id).version == 1  # recorded, not started

    with caplog.at_level(logging.WARNING):
        result = planner_step(context_for(engine, publisher=down), run_id, 1)
    assert result != "ignored"
    assert client.get_run(run_id).version == 2  # the step committed
    warnings = [r for r in caplog.records if r.name == "warrant.publish"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert run_id in warnings[0].getMessage() and "stalled-run sweep" in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
