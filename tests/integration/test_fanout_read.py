"""The Redis transport reads the control fan-out only when something is there (issue 30).

A readiness event left over from a socket that was closed and whose descriptor number a
reconnect reused reaches the fan-out's handler with nothing to read. kombu's stock read then
blocks (a timed-out read, a reconnect, another read) until someone broadcasts; measured in the
multi-host suite, it kept two tool workers from taking any command for minutes. Here the
handler is called with nothing pending, as that stale event calls it: it must return at once,
and a broadcast sent afterwards must still be delivered."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kombu import Consumer, Exchange, Queue

pytestmark = pytest.mark.services


def _with_deadline(fn: Any, seconds: float) -> tuple[bool, Any]:
    """(finished within ``seconds``, its result)."""
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.setdefault("r", fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive(), box.get("r")


def test_an_empty_readiness_event_on_the_fanout_returns_at_once(services):
    if not services.broker_url.startswith("redis"):
        pytest.skip("the Redis transport's own behaviour")
    from warrant.broker.app import make_app
    from warrant.runner.settings import WarrantSettings

    app = make_app(WarrantSettings(broker_url=services.broker_url))
    exchange = Exchange("warrant-fanout-read-test", type="fanout", durable=False)
    queue = Queue("warrant-fanout-read-test", exchange=exchange, auto_delete=True)
    received: list[Any] = []
    with app.connection_for_read() as conn:
        channel = conn.channel()
        consumer = Consumer(channel, [queue], callbacks=[lambda body, msg: received.append(body)])
        consumer.consume()
        # LISTEN mode, as a worker's pidbox is (the poller gives the subscriber its connection)
        channel.connection.cycle._client_registered(channel, channel.subclient, "LISTEN")
        channel._subscribe()
        end = time.monotonic() + 10
        while not channel.subclient.connection.can_read(timeout=0.2):  # the confirmation
            assert time.monotonic() < end, "no subscription confirmation"
        channel._receive()

        finished, delivered = _with_deadline(channel._receive, 3.0)
        assert finished, "reading the fan-out with nothing pending blocked"
        assert delivered is False

        with app.producer_or_acquire() as producer:
            producer.publish({"hello": 1}, exchange=exchange, routing_key="", declare=[exchange])
        end = time.monotonic() + 10
        while not received:
            assert time.monotonic() < end, "the broadcast was not delivered"
            _with_deadline(channel._receive, 1.0)
        assert received == [{"hello": 1}]
        channel.close()
