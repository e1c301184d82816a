"""Publishing: a stage message's queue is declared once per broker connection, and again
when the connection's cache of declared entities is empty (kombu's own cache, consulted
without kombu's per-publish copy of the queue)."""

from __future__ import annotations

from typing import Any

import pytest
from kombu import Producer, Queue

from broker.app import make_app
from broker.publish import Publisher
from runner.settings import WarrantSettings
from tests.services import Services

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
        with app.producer_or_acquire() as producer:
            producer.connection.declared_entities.clear()
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
