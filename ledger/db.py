"""Engines and sessions: one pooled engine per process and URL, never per message."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from warrant.ledger import _json

__all__ = [
    "DEFAULT_AUTOCOMMIT_POOL",
    "autocommit_engine",
    "engine_for",
    "held_autocommit",
    "normalize_url",
    "release_held",
    "reset_engines",
    "session_scope",
]

_ENGINES: dict[tuple[int, str], Engine] = {}
_FACTORIES: dict[Engine, sessionmaker[Session]] = {}


#: JSON parameters and columns through orjson (see ``warrant.ledger._json``).
_JSON = {"json_serializer": _json.dumps, "json_deserializer": _json.loads}


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and use the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def engine_for(url: str) -> Engine:
    """The process's engine for ``url`` (a fork gets its own, see ``reset_engines``)."""
    key = (os.getpid(), normalize_url(url))
    engine = _ENGINES.get(key)
    if engine is None:
        engine = create_engine(
            key[1],
            pool_size=5,
            max_overflow=5,
            pool_pre_ping=False,  # a dead connection raises OperationalError: the task retries
            pool_recycle=1800,
            **_JSON,
        )
        _ENGINES[key] = engine
    return engine


_AUTOCOMMIT: dict[tuple[Engine, bool, bool], Engine] = {}

#: Connections of an autocommit engine, per process and database (a stage holds one at a
#: time).
DEFAULT_AUTOCOMMIT_POOL = 2


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
        options = {"options": "-c synchronous_commit=off"} if relaxed else {}
        other = _AUTOCOMMIT[key] = create_engine(
            engine.url,
            isolation_level="AUTOCOMMIT",
            pool_size=1 if held else DEFAULT_AUTOCOMMIT_POOL,
            max_overflow=-1 if held else 8,
            pool_recycle=1800,
            connect_args=options,
            **_JSON,
        )
    return other


class _Held(threading.local):
    """The calling thread's autocommit connections, per (engine, relaxed), kept between uses."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.connections: dict[tuple[Engine, bool], Connection] = {}


_HELD = _Held()
#: Connections held when the process forked: the parent's, never used nor closed here.
_INHERITED: list[Connection] = []


@contextmanager
def held_autocommit(engine: Engine, *, relaxed: bool = False) -> Iterator[Connection]:
    """The calling thread's connection of :func:`autocommit_engine`, kept checked out between
    uses: a stage runs two statements per message, and checking a connection out of the pool
    and back in cost about a tenth of a stage worker's CPU per message. For stage workers
    (a prefork child: one thread); a client with many threads checks one out per use
    (:func:`warrant.ledger.steps.autocommit` with ``held=False``).

    A use that raises returns the connection to the pool (SQLAlchemy discards it if it was
    invalidated: the next use connects afresh); a nested use gets a connection of its own."""
    held = _forget_inherited()
    key = (engine, relaxed)
    conn = held.connections.pop(key, None)
    if conn is None or conn.closed or conn.invalidated:
        conn = autocommit_engine(engine, relaxed=relaxed, held=True).connect()
    try:
        yield conn
    except BaseException:
        conn.close()
        raise
    if conn.in_transaction():  # a SQLAlchemy-executed statement began one (autocommit: a no-op)
        conn.commit()
    if key in held.connections:  # nested uses: the first one to end is kept
        conn.close()
    else:
        held.connections[key] = conn


def release_held() -> None:
    """Return the calling thread's held connections to their pools."""
    held = _forget_inherited()
    connections = list(held.connections.values())
    held.connections.clear()
    for conn in connections:
        conn.close()


def _forget_inherited() -> _Held:
    """The thread's held connections, none if they were the parent process's (a fork)."""
    held = _HELD
    if held.pid != os.getpid():
        _INHERITED.extend(held.connections.values())
        held.pid, held.connections = os.getpid(), {}
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
