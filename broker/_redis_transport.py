"""kombu's Redis transport with one client per channel.

kombu builds a new ``redis.Redis`` client for every publish, every delivery with late
acknowledgement and every ack (``Channel.conn_or_acquire``); with redis-py 6+ that means
filling a dict of ~170 response callbacks each time: about a sixth of the CPU of a publish.
This channel builds the client once per connection pool and reuses it (redis-py clients are
thread-safe; their pool hands out connections). Behaviour is otherwise kombu's own.

Used for ``redis://`` broker URLs (see :func:`warrant.broker.app.make_app`); other schemes keep
their stock transport.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis

__all__ = ["TRANSPORT", "Channel", "Transport"]

#: ``broker_transport`` value naming this transport.
TRANSPORT = "warrant.broker._redis_transport:Transport"


class Channel(kombu_redis.Channel):
    _shared: tuple[Any, Any] | None = None
    """(pool, client): the client is rebuilt when the channel replaces its pool."""

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        shared = self._shared
        if shared is None or shared[0] is not pool:
            shared = self._shared = (pool, self._create_client())
        yield shared[1]


class Transport(kombu_redis.Transport):
    Channel = Channel
