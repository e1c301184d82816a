"""The Celery application of this process, and its worker-process hooks.

Plain Celery works: ``celery -A warrant.broker.app worker -Q planner,policy,tool.search_public``.
The app is built by :mod:`warrant.broker.celery_app` (queues, routing, at-least-once
settings).
"""

from __future__ import annotations

from celery.signals import worker_process_init, worker_process_shutdown

from warrant.broker import telemetry
from warrant.broker.celery_app import (
    BROKER_HEARTBEAT_S,
    deployment_app,
    make_app,
    transport_options,
)
from warrant.broker.context import close_worker_context
from warrant.ledger.db import reset_engines

__all__ = ["BROKER_HEARTBEAT_S", "app", "make_app", "transport_options"]

app = deployment_app()


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
