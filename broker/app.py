"""The Celery application: queues, routing and at-least-once settings.

Plain Celery works: ``celery -A warrant.broker.app worker -Q planner,policy,tool.search_public``.
"""

from __future__ import annotations

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

from warrant.broker import telemetry
from warrant.broker.queues import RECONCILER_QUEUE, TASK_RECONCILE, all_queues, route_task
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.db import reset_engines
from warrant.runner.errors import ServiceUnavailable
from warrant.runner.settings import WarrantSettings
from warrant.tools.plugins import registry_for

__all__ = ["app", "make_app"]

#: AMQP heartbeat: a silently dead RabbitMQ connection is noticed within about this long.
BROKER_HEARTBEAT_S = 30


def transport_options(settings: WarrantSettings) -> dict[str, object]:
    """Broker transport options. For Redis: keepalive and a health check (PING before reusing a
    connection idle this long), so connections to a restarted server are noticed and replaced;
    timeouts are retried. Ignored by the AMQP transport except the visibility timeout."""
    return {
        "visibility_timeout": settings.visibility_timeout_s,
        "socket_keepalive": True,
        "health_check_interval": 10,
        "retry_on_timeout": True,
    }


def make_app(settings: WarrantSettings | None = None) -> Celery:
    """The Celery app for ``settings`` (default: the environment). The broker is
    ``settings.broker_url``, else a running ``warrant up``'s; with neither the app is still
    built but refuses to connect (``ServiceUnavailable`` ``SERVICES_NOT_CONFIGURED`` on first
    use) rather than fall back to a default broker."""
    settings = settings or WarrantSettings()
    registry = registry_for(settings)
    longest = registry.max_timeout_s() + HARD_LIMIT_GRACE_S
    if settings.visibility_timeout_s <= longest:
        raise ValueError(
            f"visibility timeout {settings.visibility_timeout_s}s must exceed the longest tool "
            f"time limit ({longest}s), or Redis would redeliver running commands"
        )
    broker_url: str | None = settings.broker_url
    if not broker_url:
        from warrant.runner.settings import resolved_urls

        try:
            broker_url = resolved_urls(settings)[0]
        except ServiceUnavailable:  # SERVICES_NOT_CONFIGURED: no fallback broker
            broker_url = None
    celery = Celery("warrant", broker=broker_url, include=["warrant.broker.tasks"])
    if broker_url is None:
        # Importing the app stays possible; its first connection raises
        # SERVICES_NOT_CONFIGURED (see warrant.broker._unconfigured).
        from warrant.broker._unconfigured import TRANSPORT as UNCONFIGURED

        celery.conf.broker_transport = UNCONFIGURED
    elif broker_url.startswith(("redis://", "redis+socket://")):
        from warrant.broker._redis_transport import TRANSPORT

        celery.conf.broker_transport = TRANSPORT
    celery.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport_options(settings),
        # A broker restart must not end a worker: retry the connection for as long as it takes
        # (Celery's default gives up after 100 attempts and the worker exits).
        broker_connection_retry=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        broker_heartbeat=BROKER_HEARTBEAT_S,
        task_queues=all_queues(registry),
        task_default_queue="planner",
        task_routes=(route_task,),
        task_create_missing_queues=False,
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        warrant_revoked_runs_kept=settings.revoked_runs_kept,
        beat_schedule={
            "warrant-reconcile": {
                "task": TASK_RECONCILE,
                "schedule": settings.reconcile_interval_s,
                # A sweep that waited longer than one interval is superseded by the next.
                "options": {"queue": RECONCILER_QUEUE, "expires": settings.reconcile_interval_s},
            }
        },
    )
    from warrant.broker.registration import RegisterWorker
    from warrant.broker.revocations import TrimRevokedRuns

    celery.steps["worker"].add(TrimRevokedRuns)
    celery.steps["worker"].add(RegisterWorker)
    return celery


app = make_app()


@worker_process_init.connect
def _init_pool_process(**_: object) -> None:
    """A forked pool process must not share its parent's database connections; it traces
    with its own provider (OTLP exporter from the ``OTEL_*`` environment)."""
    reset_engines()
    telemetry.configure(service_name="warrant-worker")


@worker_process_shutdown.connect
def _close_process(**_: object) -> None:
    """Close the tools' deps (their clients, engines) and flush spans."""
    from warrant.broker.context import close_worker_context

    close_worker_context()
    telemetry.shutdown()
