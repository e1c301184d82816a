"""Engines and sessions: one pooled engine per process and URL, never per message."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["engine_for", "normalize_url", "relaxed", "reset_engines", "session_scope"]

_ENGINES: dict[tuple[int, str], Engine] = {}
_FACTORIES: dict[Engine, sessionmaker[Session]] = {}


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
        )
        _ENGINES[key] = engine
    return engine


_RELAXED: dict[Engine, Engine] = {}


def relaxed(engine: Engine) -> Engine:
    """An engine on the same database whose commits do not wait for the WAL flush
    (``synchronous_commit=off``), for writes that are only informational: if the server
    crashes, the last ones may be lost, never half-applied. The next ordinary commit flushes
    them too. Never use it for a write whose loss could repeat an effect."""
    other = _RELAXED.get(engine)
    if other is None:
        other = _RELAXED[engine] = create_engine(
            engine.url,
            pool_size=2,
            max_overflow=3,
            pool_recycle=1800,
            connect_args={"options": "-c synchronous_commit=off"},
        )
    return other


def reset_engines() -> None:
    """Drop engines inherited from a parent process (call after fork)."""
    for (pid, _), engine in list(_ENGINES.items()):
        if pid != os.getpid():
            engine.dispose(close=False)
    _ENGINES.clear()
    for engine in list(_RELAXED.values()):
        engine.dispose(close=False)
    _RELAXED.clear()


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any error."""
    factory = _FACTORIES.get(engine)
    if factory is None:
        factory = _FACTORIES[engine] = sessionmaker(engine, expire_on_commit=False)
    with factory() as session, session.begin():
        yield session
