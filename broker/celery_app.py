"""Building the Celery application: broker, queues, routing and at-least-once settings.

:func:`make_app` builds an app for given settings; :func:`deployment_app` is the one app of
this process, built from the environment on first use (``warrant.broker.app`` exposes it to
``celery -A``; the stages' worker context publishes with it).
"""

from __future__ import annotations

import functools
import logging
import socket
from typing import Any

from celery import Celery, bootsteps
from celery.concurrency.thread import TaskPool as ThreadsPool
from celery.signals import beat_init, worker_init
from celery.worker import state as worker_state

from warrant.broker import telemetry
from warrant.broker._redis_transport import RESTORE_EVERY_S, TRANSPORT
from warrant.broker._unconfigured import TRANSPORT as UNCONFIGURED
from warrant.broker.publish import COMMAND_HEADER, RUN_HEADER
from warrant.broker.queues import RECONCILER_QUEUE, TASK_RECONCILE, all_queues, route_task
from warrant.broker.registration import RegisterWorker
from warrant.runner.errors import ServiceUnavailable
from warrant.runner.limits import check_storage, limit_table, limits_url
from warrant.runner.settings import WarrantSettings, load_settings, resolved_urls
from warrant.tools._plugins import registry_for
from warrant.tools._registry import Registry

log = logging.getLogger("warrant.broker")

__all__ = ["BROKER_HEARTBEAT_S", "deployment_app", "make_app", "transport_options"]

#: AMQP heartbeat: a silently dead RabbitMQ connection is noticed within about this long.
BROKER_HEARTBEAT_S = 30


def transport_options(settings: WarrantSettings) -> dict[str, object]:
    """Broker transport options. For Redis, so that a server that goes silent (frozen, its
    host or network gone) is noticed within a bound and the connection replaced:

    * ``socket_timeout``: a command waiting that long for its reply fails (retried once:
      ``retry_on_timeout``), so no synchronous call blocks the worker's event loop forever;
    * ``socket_connect_timeout``: a connection attempt gives up (and is retried);
    * ``health_check_interval``: PING a connection idle that long before use; kombu also drops
      a consumer whose BRPOP reply is overdue by that long (BRPOP's own timeout is 1 s);
    * TCP keepalives probing after 10 s idle, every 5 s, 3 times, and ``TCP_USER_TIMEOUT``:
      unacknowledged data for ``socket_timeout`` (Linux).

    A worker thus notices a silent Redis within about ``1 + 2 * health_check_interval`` s
    (21 s by default) when idle, ``2 * socket_timeout`` (20 s) inside a command, and
    reconnects for as long as it takes. Ignored by the AMQP transport except the visibility
    timeout (AMQP has its heartbeat and ``broker_connection_timeout``)."""
    timeout = settings.broker_socket_timeout_s
    keepalive: dict[int, int] = {}
    for name, value in (
        ("TCP_KEEPIDLE", 10),
        ("TCP_KEEPINTVL", 5),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", round(timeout * 1000)),
    ):
        if hasattr(socket, name):  # Linux; elsewhere the system's keepalive
            keepalive[getattr(socket, name)] = value
    return {
        "visibility_timeout": settings.visibility_timeout_s,
        # Live workers renew their messages' entries (broker._redis_transport): look for a
        # dead worker's every few seconds, not every 100 s.
        "unacked_restore_interval": RESTORE_EVERY_S,
        "unacked_restore_throttle": 1,
        # The restore's mutex: a worker killed while it held it (kombu's default 300 s) stopped
        # every restore for five minutes.
        "unacked_mutex_expire": 15,
        "socket_timeout": timeout,
        "socket_connect_timeout": settings.broker_connect_timeout_s,
        "socket_keepalive": True,
        "socket_keepalive_options": keepalive,
        "health_check_interval": settings.broker_health_check_interval_s,
        "retry_on_timeout": True,
    }


def make_app(settings: WarrantSettings | None = None) -> Celery:
    """The Celery app for ``settings`` (default: the environment). The broker is
    ``settings.broker_url``, else a running ``warrant up``'s; with neither the app is still
    built but refuses to connect (``ServiceUnavailable`` ``SERVICES_NOT_CONFIGURED`` on first
    use) rather than fall back to a default broker."""
    settings = settings or load_settings()
    registry = registry_for(settings, ask_mcp_servers=False)  # queues, limits: no MCP server
    broker_url = _broker_url(settings)
    _check_limits(settings, registry, broker_url)
    celery = Celery("warrant", broker=broker_url, include=["warrant.broker.tasks"])
    _choose_transport(celery, broker_url)
    celery.conf.update(_configuration(settings, registry))
    celery.steps["worker"].add(TrimRevokedRuns)
    celery.steps["worker"].add(RegisterWorker)
    return celery


@functools.cache
def deployment_app() -> Celery:
    """This process's app, built once from the environment (a forked child keeps its
    parent's)."""
    return make_app()


@worker_init.connect
def _name_worker_for_tracing(sender: Any = None, **_: Any) -> None:
    """Before the pool forks: the worker's service name is its role's, from the queues it
    consumes (``-Q``), so its pool processes trace as ``warrant-planner``, ... ."""
    queues = sender.app.amqp.queues.consume_from if sender is not None else None
    telemetry.name_worker(list(queues) if queues else None)


@worker_init.connect
def _threads_pool_cancels_through_its_watch(sender: Any = None, **_: Any) -> None:
    """A threads pool cannot kill one running task: Celery logged a ``NotImplementedError``
    traceback for every revoke-terminate (each cancel of a run with a call in flight) and, on a
    broker connection loss, one per running task with "Terminating it instead". There the
    attempt watch interrupts the call (``broker.tool._attempt_watch``): a terminate is a no-op,
    and a connection loss lets the tasks run on, acknowledged once the broker is back (their
    messages stay leased meanwhile, ``broker._redis_transport``). Other pools are left as they
    are."""
    pool = getattr(sender, "pool_cls", None)
    name = pool if isinstance(pool, str) else getattr(pool, "__module__", "")
    if sender is None or "thread" not in str(name):
        return
    sender.app.conf.worker_cancel_long_running_tasks_on_connection_loss = False
    ThreadsPool.terminate_job = _no_terminate


def _no_terminate(self: Any, pid: Any, signal: Any = None) -> None:
    log.debug("terminate of a threads-pool task: the attempt watch interrupts it")


@beat_init.connect
def _trace_beat(**_: Any) -> None:
    """Beat publishes the reconciler's sweeps: traced as ``warrant-beat``."""
    telemetry.configure(service_name=telemetry.SERVICE_NAMES["beat"])


def _check_limits(settings: WarrantSettings, registry: Registry, broker_url: str | None) -> None:
    """Bad shared limits (``WARRANT_MODEL_LIMITS``, ``WARRANT_TOOL_LIMITS``, a tool contract's)
    are refused here, before any worker starts: ``SettingsInvalid`` ``INVALID_LIMIT``."""
    table = limit_table(settings, registry)
    check_storage(table, limits_url(settings, broker_url))


def _broker_url(settings: WarrantSettings) -> str | None:
    """The configured broker, else a running ``warrant up``'s; None with neither."""
    if settings.broker_url:
        return settings.broker_url
    try:
        return resolved_urls(settings)[0]
    except ServiceUnavailable:  # SERVICES_NOT_CONFIGURED: no fallback broker
        return None


def _choose_transport(celery: Celery, broker_url: str | None) -> None:
    if broker_url is None:
        # Importing the app stays possible; its first connection raises
        # SERVICES_NOT_CONFIGURED (see warrant.broker._unconfigured).

        celery.conf.broker_transport = UNCONFIGURED
    elif broker_url.startswith(("redis://", "redis+socket://")):
        celery.conf.broker_transport = TRANSPORT


def _configuration(settings: WarrantSettings, registry: Registry) -> dict[str, Any]:
    return {
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": transport_options(settings),
        # A broker restart must not end a worker: retry the connection for as long as it takes
        # (Celery's default gives up after 100 attempts and the worker exits).
        "broker_connection_retry": True,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,
        "broker_heartbeat": BROKER_HEARTBEAT_S,
        "broker_connection_timeout": settings.broker_connect_timeout_s,
        "task_queues": all_queues(registry),
        "task_default_queue": "planner",
        "task_routes": (route_task,),
        "task_create_missing_queues": False,
        "worker_send_task_events": settings.task_events,
        "task_send_sent_event": settings.task_events,
        "worker_hijack_root_logger": False,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "warrant_revoked_runs_kept": settings.revoked_runs_kept,
        "beat_schedule": {
            "warrant-reconcile": {
                "task": TASK_RECONCILE,
                "schedule": settings.reconcile_interval_s,
                # A sweep that waited longer than one interval is superseded by the next.
                "options": {"queue": RECONCILER_QUEUE, "expires": settings.reconcile_interval_s},
            }
        },
    }


# -- Keep each worker's memory of revoked runs bounded.
#
# A cancel revokes every message of a run with ``revoke_by_stamped_headers`` (see
# :meth:`warrant.broker.publish.Publisher.revoke_run`). Celery keeps those stamps in a plain list
# per header, in every worker, for the worker's lifetime, and checks each incoming stamped message
# against the whole list: memory and per-message cost grow with every cancellation. This worker
# step trims the list to the most recent ``revoked_runs_kept`` runs, every
# :data:`TRIM_INTERVAL_S`. Forgetting an old revocation is safe: a stage never acts on a
# cancelled run's message (its compare-and-set on the run's version fails and it is ignored);
# the revocation only spares the queue that work and interrupts a running tool at once.


#: Seconds between trims.
TRIM_INTERVAL_S = 30.0


def trim_revoked_runs(keep: int, revoked: dict[str, Any] | None = None) -> int:
    """Keep the ``keep`` most recently revoked runs; returns how many were forgotten."""
    revoked = worker_state.revoked_stamps if revoked is None else revoked
    forgotten = 0
    for header in (RUN_HEADER, COMMAND_HEADER):  # runs cancelled; branches a merge cut
        stamps = revoked.get(header)
        if not isinstance(stamps, list) or len(stamps) <= keep:
            continue  # (repeats are only dropped once the list is over the bound)
        distinct = list(dict.fromkeys(reversed(stamps)))  # newest first, without repeats
        revoked[header] = distinct[:keep][::-1]
        forgotten += max(0, len(distinct) - keep)
    return forgotten


class TrimRevokedRuns(bootsteps.StartStopStep):
    """A worker step (registered by :func:`warrant.broker.app.make_app`)."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.tref: Any = None

    def start(self, worker: Any) -> None:
        keep = worker.app.conf.get("warrant_revoked_runs_kept", 1000)
        self.tref = worker.timer.call_repeatedly(TRIM_INTERVAL_S, trim_revoked_runs, (keep,))

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
