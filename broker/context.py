"""What a worker process lends the stages: engine, registry, publisher, tool deps, clock."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Engine

from warrant.broker.celery_app import deployment_app
from warrant.broker.deps import ToolDepsSet
from warrant.broker.limits import SharedLimits, shared_limits
from warrant.broker.publish import Publisher
from warrant.ledger.db import engine_for
from warrant.ledger.db_clock import DatabaseClock
from warrant.runner.settings import WarrantSettings, load_settings, resolved_urls
from warrant.tools._contract import Tool
from warrant.tools._plugins import registry_for
from warrant.tools._registry import Registry

__all__ = ["StageContext", "close_worker_context", "context_for", "worker_context"]


@dataclass(frozen=True, kw_only=True)
class StageContext:
    engine: Engine
    registry: Registry
    publisher: Publisher
    deps: ToolDepsSet
    settings: WarrantSettings = field(default_factory=WarrantSettings)
    clock: Callable[[], float] = field(default=time.time)
    limits: SharedLimits | None = None
    """The deployment's shared limits (``broker.limits``; None: none declared)."""

    @property
    def tool_deps(self) -> Any:
        """The ledger's stores (artifacts, memory, a run's status)."""
        return self.deps.ledger

    def deps_for(self, tool: Tool[Any, Any]) -> Any:
        """What ``tool`` sees as ``ctx.deps``."""
        return self.deps.for_tool(tool)


def context_for(
    engine: Engine,
    *,
    publisher: Any,
    settings: WarrantSettings | None = None,
    registry: Registry | None = None,
    database_url: str = "",
) -> StageContext:
    """The stages' context on ``engine``: the deployment's registry and tool deps (a worker's,
    with a :class:`Publisher`; or one process driving the stages itself, with a
    :class:`~warrant.broker.publish.RecordingPublisher`)."""
    settings = settings or load_settings()
    registry = registry or registry_for(settings)
    return StageContext(
        engine=engine,
        registry=registry,
        publisher=publisher,
        deps=ToolDepsSet(
            registry,
            engine=engine,
            settings=settings,
            database_url=database_url,
            publish_run=partial(_first_step, publisher),
            revoke_run=partial(_revoke_run, publisher),
        ),
        settings=settings,
        clock=DatabaseClock(engine),
        limits=shared_limits(settings, registry),
    )


def _first_step(publisher: Any, run_id: str) -> None:
    """A sub-run's first planner message (``delegate``), published after its spawn commits."""
    publisher.planner(run_id, 1)


def _revoke_run(publisher: Any, run_id: str, in_flight: bool) -> None:
    """A cancelled sub-run's messages dropped and its tool call interrupted (``revoke``)."""
    revoke = getattr(publisher, "revoke_run", None)
    if revoke is not None:
        revoke(run_id, terminate=in_flight)


_CONTEXTS: dict[int, StageContext] = {}


def worker_context() -> StageContext:
    """The process's context, built once per (forked) process; it publishes with the
    process's Celery app (:func:`~warrant.broker.celery_app.deployment_app`)."""
    ctx = _CONTEXTS.get(os.getpid())
    if ctx is None:
        _, database_url = resolved_urls()
        ctx = context_for(
            engine_for(database_url),
            publisher=Publisher(deployment_app()),
            database_url=database_url,
        )
        _CONTEXTS.clear()
        _CONTEXTS[os.getpid()] = ctx
    return ctx


def close_worker_context() -> None:
    """Close this process's tool deps (worker process shutdown)."""
    ctx = _CONTEXTS.pop(os.getpid(), None)
    if ctx is not None:
        ctx.deps.close()
