"""Engines and sessions: one pooled engine per process and URL, never per message."""

from __future__ import annotations

import functools
import json
import os
import re
import select
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import orjson
import psycopg
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from warrant.ledger.connect_options import timeout_args
from warrant.runner.settings import WarrantSettings, load_settings

__all__ = [
    "DEFAULT_AUTOCOMMIT_POOL",
    "DEFAULT_HELD_CONNECTIONS",
    "autocommit_engine",
    "connect_args",
    "engine_for",
    "held_autocommit",
    "is_disconnect",
    "normalize_url",
    "ping",
    "release_held",
    "reset_engines",
    "retry_once_on_disconnect",
    "session_scope",
    "unbounded",
]

_ENGINES: dict[tuple[int, str], Engine] = {}
_FACTORIES: dict[Engine, sessionmaker[Session]] = {}


# -- JSON for the ledger's connections: orjson, and the standard library where they differ.
#
# psycopg encodes every JSON parameter and decodes every JSON column with these (the engines
# pass them as SQLAlchemy's ``json_serializer`` / ``json_deserializer``); a stage binds and reads
# several JSON documents per statement, and the standard library spent about a quarter of a
# stage's own CPU on them. The results are the standard library's:
#
# * encoding: what orjson refuses (integers beyond 64 bits, anything that is not plain JSON data
#   — ``datetime`` and dataclasses are passed through to refuse them, as ``json.dumps`` does) is
#   encoded by ``json.dumps``; keys that are not strings are converted as ``json.dumps`` converts
#   them. One difference is kept: NaN and infinities become ``null`` (``json.dumps`` writes
#   ``NaN``, which PostgreSQL rejects).
# * decoding: a document with a run of 20 or more digits (an integer orjson would turn into a
#   float) is decoded by ``json.loads``, which keeps it exact.


_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)
_LONG_NUMBER = re.compile(rb"\d{20}")


def dumps(value: Any) -> bytes | str:
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except TypeError:
        return json.dumps(value)


def loads(data: bytes | str) -> Any:
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_NUMBER.search(raw):
        return json.loads(raw)
    return orjson.loads(raw)


#: JSON parameters and columns through orjson (:func:`dumps`, :func:`loads`).
_JSON = {"json_serializer": dumps, "json_deserializer": loads}


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and use the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def connect_args(
    url: str, settings: WarrantSettings | None = None, *, server: dict[str, str] | None = None
) -> dict[str, Any]:
    """libpq parameters of every connection: :func:`warrant.ledger.connect_options.timeout_args`
    with this process's settings."""
    return timeout_args(url, settings or load_settings(), server=server)


def unbounded(conn: Connection) -> None:
    """Lift the session's statement and idle-in-transaction timeouts for the rest of the
    current transaction: migrations and retention run long statements on purpose."""
    conn.execute(text("SET LOCAL statement_timeout = 0"))
    conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))


def engine_for(url: str) -> Engine:
    """The process's engine for ``url`` (a fork gets its own, see ``reset_engines``); its
    connections have the timeouts of :func:`connect_args`."""
    key = (os.getpid(), normalize_url(url))
    engine = _ENGINES.get(key)
    if engine is None:
        engine = create_engine(
            key[1],
            pool_size=5,
            max_overflow=5,
            pool_pre_ping=False,  # checked at checkout without a round trip instead
            pool_recycle=1800,
            connect_args=connect_args(url),
            **_JSON,
        )
        _check_at_checkout(engine)
        _ENGINES[key] = engine
    return engine


_AUTOCOMMIT: dict[tuple[Engine, bool, bool], Engine] = {}

#: Connections of an autocommit engine, per process and database, kept open (a stage holds
#: one at a time; the threads of a threads-pool worker beyond its holders share them). No
#: overflow: with 2 kept and 8 of overflow, a planner at 1000 runs in flight opened and closed
#: one connection every other step, each a backend PostgreSQL forked; a use beyond these
#: waits for one. With :data:`DEFAULT_HELD_CONNECTIONS`, 18 per process at most, as before.
DEFAULT_AUTOCOMMIT_POOL = 10


def ping(engine: Engine) -> None:
    """One round trip to the database (``/healthz``); raises what the driver raises."""
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


def autocommit_engine(engine: Engine, *, relaxed: bool = False, held: bool = False) -> Engine:
    """An engine on the same database whose connections are in autocommit mode for good (each
    statement is its own transaction; no mode switch and reset on every checkout), with its
    own small pool.

    ``relaxed``: its commits also do not wait for the WAL flush (``synchronous_commit=off``),
    for writes that are only informational: if the server crashes, the last ones may be lost,
    never half-applied, and the next ordinary commit flushes them too. Never use it for a
    write whose loss could repeat an effect.

    ``held``: the engine of :func:`held_autocommit`, whose threads each keep a connection:
    its pool never makes a thread wait (one connection per thread that uses it)."""
    key = (engine, relaxed, held)
    other = _AUTOCOMMIT.get(key)
    if other is None:
        server = {"synchronous_commit": "off"} if relaxed else {}
        options = connect_args(engine.url.render_as_string(hide_password=False), server=server)
        other = _AUTOCOMMIT[key] = create_engine(
            engine.url,
            isolation_level="AUTOCOMMIT",
            pool_size=1 if held else DEFAULT_AUTOCOMMIT_POOL,
            max_overflow=-1 if held else 0,
            pool_recycle=1800,
            connect_args=options,
            **_JSON,
        )
        _check_at_checkout(other)
    return other


#: Threads per process that keep an autocommit connection of an engine between uses
#: (:func:`held_autocommit`).
#: A prefork pool child has one thread; a threads-pool worker (the planner) has up to
#: ``WARRANT_PLANNER_CONCURRENCY`` (1024 allowed), and a connection kept by each would exceed
#: PostgreSQL's ``max_connections`` (100 by default): the threads beyond these check one out
#: of the engine's bounded pool for each use instead.
DEFAULT_HELD_CONNECTIONS = 8


class _Held(threading.local):
    """The calling thread's autocommit connections, per (engine, relaxed), kept between uses,
    and the keys it may keep one for (each a slot of :data:`_HOLDERS`)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.connections: dict[tuple[Engine, bool], Connection] = {}
        self.slots: set[tuple[Engine, bool]] = set()


class _Holders:
    """How many threads of each process keep a connection of each (engine, relaxed); a fork
    starts at none."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._count: dict[tuple[int, tuple[Engine, bool]], int] = {}

    def take(self, pid: int, key: tuple[Engine, bool]) -> bool:
        with self._lock:
            if self._count.get((pid, key), 0) >= self.limit:
                return False
            self._count[(pid, key)] = self._count.get((pid, key), 0) + 1
            return True

    def give_back(self, pid: int, key: tuple[Engine, bool]) -> None:
        with self._lock:
            self._count[(pid, key)] = max(0, self._count.get((pid, key), 0) - 1)


_HELD = _Held()
_HOLDERS = _Holders(DEFAULT_HELD_CONNECTIONS)
#: Connections held when the process forked: the parent's, never used nor closed here.
_INHERITED: list[Connection] = []


@contextmanager
def held_autocommit(engine: Engine, *, relaxed: bool = False) -> Iterator[Connection]:
    """The calling thread's connection of :func:`autocommit_engine`, kept checked out between
    uses: a stage runs two statements per message, and checking a connection out of the pool
    and back in cost about a tenth of a stage worker's CPU per message. For stage workers
    (a prefork child: one thread); a client with many threads checks one out per use
    (:func:`warrant.ledger.stage_loads.autocommit` with ``held=False``).

    A held connection the server has hung up on (a database restart) is replaced before the
    use (:func:`_hung_up`, no round trip). A use that raises returns the connection to the
    pool, invalidated if the error was a lost connection (SQLAlchemy then discards it: the next
    use connects afresh); a nested use gets a connection of its own.

    At most :data:`DEFAULT_HELD_CONNECTIONS` threads of a process keep one per engine; the
    others' uses check one out of :func:`autocommit_engine`'s bounded pool and return it."""
    held = _forget_inherited()
    key = (engine, relaxed)
    if key not in held.slots:
        if not _HOLDERS.take(held.pid, key):  # enough threads keep one: this use checks one out
            with autocommit_engine(engine, relaxed=relaxed).connect() as pooled:
                yield pooled
                if pooled.in_transaction():
                    pooled.commit()
            return
        held.slots.add(key)
    conn = held.connections.pop(key, None)
    if conn is not None and not conn.closed and not conn.invalidated and _hung_up(conn):
        conn.invalidate()
        conn.close()
    if conn is None or conn.closed or conn.invalidated:
        conn = autocommit_engine(engine, relaxed=relaxed, held=True).connect()
    try:
        yield conn
    except BaseException as exc:
        _drop_if_lost(conn, exc)
        raise
    if conn.in_transaction():  # a SQLAlchemy-executed statement began one (autocommit: a no-op)
        conn.commit()
    if key in held.connections:  # nested uses: the first one to end is kept
        conn.close()
    else:
        held.connections[key] = conn


def _hung_up(conn: Connection) -> bool:
    """Has the server closed this idle connection (see :func:`_driver_hung_up`)?"""
    try:
        return _driver_hung_up(conn.connection.driver_connection)
    except (psycopg.Error, OSError, ValueError):
        return True


def _driver_hung_up(driver: Any) -> bool:
    """Has the server closed this idle psycopg connection, or sent something unasked?
    PostgreSQL tells a session it terminates (shutdown, restart, ``pg_terminate_backend``)
    with a FATAL message before closing it, so an idle connection with bytes to read (or a
    hang-up) is dead. A zero-timeout poll of the socket: no round trip, unlike
    ``pool_pre_ping``. (A connection that merely went silent, a lost network, still fails on
    use: the caller's retry handles that.)"""
    if driver is None or driver.closed or driver.broken:
        return True
    poller = select.poll()
    poller.register(driver.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def _check_at_checkout(engine: Engine) -> None:
    """Every checkout of ``engine``'s pool skips connections the server has hung up on (the
    pool discards them and connects afresh)."""

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        try:
            dead = _driver_hung_up(dbapi_connection)
        except (psycopg.Error, OSError, ValueError):
            dead = True
        if dead:
            raise DisconnectionError("the server closed this pooled connection")


def _drop_if_lost(conn: Connection, exc: BaseException) -> None:
    """Return a held connection after a failed use; invalidated first if the error says the
    connection is gone, so the pool discards it instead of handing it out again."""
    if not conn.closed and not conn.invalidated and is_disconnect(exc):
        conn.invalidate(exc)
    conn.close()


def is_disconnect(exc: BaseException) -> bool:
    """Did ``exc`` come from a lost database connection (server restart, terminated session,
    broken socket) rather than from the statement itself?"""
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated)
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


_P = ParamSpec("_P")
_T = TypeVar("_T")


def retry_once_on_disconnect(call: Callable[_P, _T]) -> Callable[_P, _T]:
    """Call again, once, when the first call failed on a lost connection (the pool has then
    discarded it). Only for reads, and for writes that cannot apply twice."""

    @functools.wraps(call)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return call(*args, **kwargs)
        except (DBAPIError, psycopg.Error) as exc:
            if not is_disconnect(exc):
                raise
        return call(*args, **kwargs)

    return wrapper


def release_held() -> None:
    """Return the calling thread's held connections to their pools."""
    held = _forget_inherited()
    connections = list(held.connections.values())
    held.connections.clear()
    for key in held.slots:
        _HOLDERS.give_back(held.pid, key)
    held.slots.clear()
    for conn in connections:
        conn.close()


def _forget_inherited() -> _Held:
    """The thread's held connections, none if they were the parent process's (a fork)."""
    held = _HELD
    if held.pid != os.getpid():
        _INHERITED.extend(held.connections.values())
        held.pid, held.connections, held.slots = os.getpid(), {}, set()
    return held


def reset_engines() -> None:
    """Drop engines inherited from a parent process (call after fork)."""
    _forget_inherited()
    for (pid, _), engine in list(_ENGINES.items()):
        if pid != os.getpid():
            engine.dispose(close=False)
    _ENGINES.clear()
    for engine in list(_AUTOCOMMIT.values()):
        engine.dispose(close=False)
    _AUTOCOMMIT.clear()


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any error."""
    factory = _FACTORIES.get(engine)
    if factory is None:
        factory = _FACTORIES[engine] = sessionmaker(engine, expire_on_commit=False)
    with factory() as session, session.begin():
        yield session
