"""What a worker process lends the stages: engine, registry, publisher, tool deps, clock."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from warrant.broker.publish import Publisher
from warrant.ledger.db import engine_for
from warrant.ledger.stores import LedgerToolDeps
from warrant.runner.settings import WarrantSettings, resolved_urls
from warrant.tools.registry import Registry, default_registry

__all__ = ["StageContext", "context_for", "worker_context"]


@dataclass(frozen=True, kw_only=True)
class StageContext:
    engine: Engine
    registry: Registry
    publisher: Publisher
    tool_deps: Any
    settings: WarrantSettings = field(default_factory=WarrantSettings)
    clock: Callable[[], float] = field(default=time.time)


def context_for(engine: Engine, *, publisher: Any) -> StageContext:
    """The stages' context on ``engine``: the default registry and ledger-backed tool deps
    (a worker's, with a :class:`Publisher`; or one process driving the stages itself, with a
    :class:`~warrant.broker.publish.RecordingPublisher`)."""
    return StageContext(
        engine=engine,
        registry=default_registry(),
        publisher=publisher,
        tool_deps=LedgerToolDeps(engine),
    )


_CONTEXTS: dict[int, StageContext] = {}


def worker_context() -> StageContext:
    """The process's context, built once per (forked) process."""
    ctx = _CONTEXTS.get(os.getpid())
    if ctx is None:
        from warrant.broker.app import app

        _, database_url = resolved_urls()
        ctx = context_for(engine_for(database_url), publisher=Publisher(app))
        _CONTEXTS.clear()
        _CONTEXTS[os.getpid()] = ctx
    return ctx
