"""kombu's Redis transport with one client per channel, and channels that survive a restart.

One client per channel: kombu builds a new ``redis.Redis`` client for every publish, every
delivery with late acknowledgement and every ack (``Channel.conn_or_acquire``); with redis-py 6+
that means filling a dict of ~170 response callbacks each time: about a sixth of the CPU of a
publish. This channel builds the client once per connection pool and reuses it (redis-py clients
are thread-safe; their pool hands out connections).

Surviving a Redis restart (issue 16): when the broker goes away, Celery closes the worker's
``kombu.Connection``. ``Transport.close_connection`` closes the channels one by one; a channel
whose close touches the dead socket (BRPOP read, PUNSUBSCRIBE of the control fan-out, restoring
unacked messages) raises, the remaining channels are never detached, and
``Connection._do_close_transport`` then sets ``transport.client = None``. A channel left behind
still holds late-acknowledged messages; acking, rejecting or restoring one of them builds the
channel's synchronous pool lazily (kombu creates it on first use, and drops it in
``_disconnect_pools``), and ``_connparams`` reads ``self.connection.client.hostname``:
``AttributeError: 'NoneType' object has no attribute 'hostname'``. Celery only tolerates
*connection* errors there, so the worker stops with "Unrecoverable error" (kombu#582, #970 show
the same traceback). This channel therefore

* keeps the connection parameters it was created with, so a pool it builds later still points at
  the broker (a Redis ``ConnectionPool`` reconnects on demand; the ack lands once Redis is back);
* keeps its synchronous pool across ``_disconnect_pools`` (disconnected, not dropped);
* raises ``redis.ConnectionError`` (which Celery handles: it logs and reconnects) rather than
  ``AttributeError`` if it is used with no parameters at all.

Reading the fan-out only when there is something to read (issue 30): the worker's event loop
polls a batch of readiness events, then runs their callbacks one by one. When an earlier
callback of the batch closes a connection and a reconnect reuses its descriptor number, a
later event of the same batch (the old socket's hang-up) is delivered for the new socket. For
the control fan-out's subscription (pidbox: remote control, revocations) kombu then reads a
reply that is not there: a blocking read that times out, reconnects and reads again, until
somebody broadcasts. Measured in the multi-host suite (both tool hosts cut for 30 s while
their pool processes died at their hard limit): after the network healed both tool workers
sat in that read and took no command for minutes; a ``celery inspect`` released them. This
channel reads the subscription only when its connection has data (buffered or on the socket).

Unacknowledged messages come back within seconds of their worker's death (issue 47): kombu
keeps a late-acknowledged message in Redis's ``unacked`` hash, indexed by its delivery time,
and gives it back to the queue once it is older than the visibility timeout, whether its
worker died or is still working on it. So the timeout had to exceed the longest tool time
limit, and a SIGKILLed worker's whole in-flight set (hundreds of messages on a threads pool)
sat there for an hour. Here every worker process **renews** the index entries of the messages
it holds (:class:`UnackedLease`, one thread, every :data:`RENEW_EVERY_S`), so the visibility
timeout is a lease: a live worker's messages are never given back however long their task
runs, and a dead worker's are back once their last renewal is older than the timeout
(``WARRANT_VISIBILITY_TIMEOUT_S``, 45 s by default; looked for every
:data:`RESTORE_EVERY_S`). The index is scored on the Redis server's clock (the local clock
corrected by the offset the renewer measures), so a worker whose clock is off neither loses
its messages nor takes another's.

Used for ``redis://`` and ``redis+socket://`` broker URLs (see
:func:`warrant.broker.app.make_app`); other schemes keep their stock transport.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.utils.json import dumps

__all__ = ["RENEW_EVERY_S", "RESTORE_EVERY_S", "TRANSPORT", "Channel", "Transport"]

log = logging.getLogger("warrant.broker")

#: ``broker_transport`` value naming this transport.
TRANSPORT = "warrant.broker._redis_transport:Transport"
#: How often a worker renews the index entries of the messages it holds.
RENEW_EVERY_S = 5.0
#: How often a worker looks for messages whose holder stopped renewing them.
RESTORE_EVERY_S = 5


class _ServerClock:
    """The Redis server's clock as this process reads it: ``time.time()`` plus an offset the
    renewer measures (``TIME``) at each renewal."""

    offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def measure(self, client: Any) -> None:
        sent = time.time()
        seconds, micros = client.time()
        back = time.time()
        self.offset = seconds + micros / 1e6 - (sent + back) / 2


_clock = _ServerClock()


class QoS(kombu_redis.QoS):
    """kombu's QoS with the unacked index on the server's clock."""

    def append(self, message: Any, delivery_tag: Any) -> None:
        delivery = message.delivery_info
        with self.pipe_or_acquire() as pipe:
            pipe.zadd(self.unacked_index_key, {delivery_tag: _clock.now()}).hset(
                self.unacked_key,
                delivery_tag,
                dumps([message._raw, delivery["exchange"], delivery["routing_key"]]),
            ).execute()
        kombu_redis.virtual.QoS.append(self, message, delivery_tag)

    def restore_visible(self, start: int = 0, num: int = 10, interval: int = 10) -> None:
        with self.channel.conn_or_acquire() as client:
            ceil = _clock.now() - self.visibility_timeout
            try:
                with kombu_redis.Mutex(client, self.unacked_mutex_key, self.unacked_mutex_expire):
                    visible = client.zrange(
                        self.unacked_index_key, ceil, 0, desc=True, byscore=True,
                        offset=num and start, num=num, withscores=True,
                    )  # fmt: skip
                    for tag, _score in visible or []:
                        self.restore_by_tag(tag, client)
            except kombu_redis.MutexHeld:
                pass


class UnackedLease:
    """Renews, every :data:`RENEW_EVERY_S`, the index entries of the messages this process's
    channels hold (one daemon thread per process)."""

    def __init__(self) -> None:
        self.channels: weakref.WeakSet[Channel] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.pid: int | None = None

    def add(self, channel: Channel) -> None:
        with self.lock:
            self.channels.add(channel)
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(
                    target=self._run, name="warrant-unacked-lease", daemon=True
                ).start()

    def _run(self) -> None:
        pid = os.getpid()
        while pid == os.getpid():
            time.sleep(RENEW_EVERY_S)
            with self.lock:
                channels = list(self.channels)
            for channel in channels:
                try:
                    self.renew(channel)
                except Exception as exc:  # Redis away: the next renewal tries again
                    log.warning("renewing unacknowledged messages failed: %s", exc)

    @staticmethod
    def renew(channel: Channel) -> None:
        qos = channel._qos
        tags = list(qos._delivered) if qos is not None else []
        if not tags:
            return
        with channel.conn_or_acquire() as client:
            _clock.measure(client)
            now = _clock.now()
            client.zadd(channel.unacked_index_key, dict.fromkeys(tags, now), xx=True)


_lease = UnackedLease()


class Channel(kombu_redis.Channel):
    QoS = QoS
    _shared: tuple[Any, Any] | None = None
    """(pool, client): the client is rebuilt when the channel replaces its pool."""
    _origin: SimpleNamespace | None = None
    """The transport's ``client`` and ``default_port`` when this channel was created."""

    def __init__(self, connection: Any, *args: Any, **kwargs: Any) -> None:
        self._origin = SimpleNamespace(
            client=connection.client, default_port=connection.default_port
        )
        super().__init__(connection, *args, **kwargs)
        _lease.add(self)

    def _connparams(self, asynchronous: bool = False) -> Any:
        transport = self.connection
        if transport is not None and transport.client is not None:
            return super()._connparams(asynchronous=asynchronous)
        if self._origin is None or self._origin.client is None:
            raise redis.ConnectionError("broker connection closed (channel has no parameters)")
        # The Connection was closed under this channel: build from the parameters it had.
        self.connection = self._origin
        try:
            return super()._connparams(asynchronous=asynchronous)
        finally:
            self.connection = transport

    def _disconnect_pools(self) -> None:
        pool = self._pool
        super()._disconnect_pools()
        self._pool = pool  # disconnected; reconnects on demand if a late ack still needs it

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

    def _receive(self) -> bool:
        client = self.subclient
        connection = client.connection
        try:
            ready = connection is not None and connection.can_read(timeout=0)
        except self.connection_errors:
            self._in_listen = None  # type: ignore[assignment]  # as kombu's own read does: resubscribe after reconnecting
            raise
        if not ready:
            return False  # a readiness event meant for a socket that is gone
        return bool(super()._receive())


class Transport(kombu_redis.Transport):
    Channel = Channel
