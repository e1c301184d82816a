"""The Celery application of this process, and its worker-process hooks.

Plain Celery works: ``celery -A warrant.broker.app worker -Q planner,policy,tool.search_public``.
The app is built by :mod:`warrant.broker.celery_app` (queues, routing, at-least-once
settings).
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import (
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from kombu import Connection

from warrant.broker import telemetry
from warrant.broker._redis_transport import TRANSPORT as REDIS_TRANSPORT
from warrant.broker.celery_app import (
    BROKER_HEARTBEAT_S,
    deployment_app,
    make_app,
    transport_options,
)
from warrant.broker.context import close_worker_context
from warrant.ledger.db import reset_engines
from warrant.runner.settings import WarrantSettings, load_settings
from warrant.tools._plugins import registry_for

__all__ = ["BROKER_HEARTBEAT_S", "app", "make_app", "transport_options"]

# A connection names its transport in its URL (``as_uri``, ``info``) by the transport's name,
# here a module path: Flower builds its broker client from that URL's scheme, knows ``redis``
# but not ``warrant.broker._redis_transport:Transport`` ("'redis' broker is not supported").
# kombu's aliases (``pyamqp`` -> ``amqp``) name our Redis transport ``redis`` in URLs; the
# connection itself (``transport_cls``, clones, pools) keeps using our transport.
Connection.resolve_aliases[REDIS_TRANSPORT] = "redis"

app = deployment_app()


@worker_init.connect
def _load_registry(**_: object) -> None:
    """Before the pool forks: the full registry (each MCP server asked for its tools once, in
    this process), which every pool process inherits; a server that cannot be reached stops
    the worker here. The app itself is built from the declared registry (no server asked).
    The settings were validated when this module built the app (``SETTINGS_INVALID``)."""
    load_settings()
    registry_for()


@worker_process_init.connect
def _init_pool_process(**_: object) -> None:
    """A forked pool process must not share its parent's database connections; it traces
    with its own provider (OTLP exporter from the ``OTEL_*`` environment)."""
    reset_engines()
    telemetry.configure(service_name="warrant-worker")


@worker_process_shutdown.connect
def _close_process(**_: object) -> None:
    """Close the tools' deps (their clients, engines) and flush spans."""
    close_worker_context()
    telemetry.shutdown()


def _pool_name(worker: Any) -> str:
    pool = worker.pool_cls  # at worker_init: the ``-P`` name or a class
    if isinstance(pool, str):
        return pool
    return str(getattr(pool, "__module__", "")).rpartition(".")[2]


def _in_process(worker: Any) -> bool:
    """Does this worker run its tasks in its own process (solo, threads) rather than forked
    pool processes?"""
    return _pool_name(worker) in ("solo", "threads", "thread")


@worker_init.connect
def _init_in_process_worker(sender: Any = None, **_: object) -> None:
    """A solo worker (a one-process policy worker) or a threads-pool worker (the planner) runs
    its tasks in this process: it traces here, having no pool process to do it. A solo worker
    sends no AMQP heartbeats: a task holds the event loop that sends them, and a model call
    longer than two beats would make RabbitMQ close the connection (py-amqp's TCP keepalive
    still notices a dead peer); a threads-pool worker's loop stays free and keeps them."""
    if sender is None or not _in_process(sender):
        return
    if _pool_name(sender) == "solo":
        sender.app.conf.broker_heartbeat = 0
    telemetry.configure(service_name=telemetry.WORKER_SERVICE)


@worker_shutdown.connect
def _close_in_process_worker(sender: Any = None, **_: object) -> None:
    if sender is not None and _in_process(sender):
        _close_process()


# -- Observe mode is loud: a worker whose deployment observes tools (``WARRANT_OBSERVE_TOOLS``)
# says so in its log when it is ready, as a warning (``docs/observe-mode.md``).


log = logging.getLogger("warrant.observe")


def observe_warning(settings: WarrantSettings) -> str | None:
    """The warning a worker logs at start (``None``: observe mode is off)."""
    observed = settings.observed_tools
    if not observed:
        return None
    which = "EVERY tool" if "*" in observed else ", ".join(sorted(observed))
    return (
        f"OBSERVE MODE (WARRANT_OBSERVE_TOOLS): the gate lets through calls of {which} that "
        "it would refuse for lack of a grant, and traces each as gate.would_refuse; "
        "see `warrant gate report`"
    )


@worker_ready.connect
def _warn_at_start(**_: object) -> None:
    warning = observe_warning(load_settings())
    if warning is not None:
        log.warning(warning)
