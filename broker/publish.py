"""Publishing stage messages. A message carries ids and the expected version, nothing else."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError
from kombu.utils.uuid import uuid

from warrant.broker.queues import (
    RECONCILER_QUEUE,
    TASK_PLANNER,
    TASK_POLICY,
    TASK_POLL_JOBS,
    TASK_TOOL,
    route_task,
)
from warrant.runner.errors import BrokerUnavailable

__all__ = [
    "DEFAULT_HELD_PRODUCERS",
    "FAIL_FAST_CONNECT_TIMEOUT_S",
    "FAIL_FAST_RETRY_POLICY",
    "Outbox",
    "Publisher",
    "RecordingPublisher",
    "log_deferred",
]

log = logging.getLogger("warrant.publish")

RUN_HEADER = "warrant_run_id"
#: A tool message's second stamp: its command (a parallel step's merge revokes one branch).
COMMAND_HEADER = "warrant_command_id"


def _stamps(run_id: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The message's stamped headers: the run's, and a tool message's command."""
    stamps = {RUN_HEADER: run_id}
    if "command_id" in kwargs:
        stamps[COMMAND_HEADER] = kwargs["command_id"]
    return {"stamped_headers": list(stamps), **stamps}


#: A caller waiting on a publish (``Client.start_run``) gives up within a few seconds (kombu's
#: ``ensure``; measured: about 1 s when the connection is refused, 1.5 s when the broker does
#: not answer), each connection attempt and reply bounded by :data:`FAIL_FAST_CONNECT_TIMEOUT_S`.
FAIL_FAST_RETRY_POLICY: Mapping[str, float] = {
    "max_retries": 2,
    "interval_start": 0.5,
    "interval_step": 0.0,
    "interval_max": 0.5,
}
#: Seconds to connect to the broker (and, with Redis, for any one reply) for such a caller.
FAIL_FAST_CONNECT_TIMEOUT_S = 1.5

#: What a publish raises when the broker cannot be reached (kombu re-raises the transport's
#: connection errors as its ``OperationalError``; a socket timeout is an ``OSError``).
_BROKER_ERRORS = (KombuOperationalError, OSError)


class Publisher:
    """Publishes stage messages through Celery's message protocol, on a producer the thread
    holds (see :meth:`_send` and :meth:`_producer`).

    A publish the broker does not take raises :class:`~warrant.runner.errors.BrokerUnavailable`
    naming the run. ``retry_policy`` (kombu's, e.g. :data:`FAIL_FAST_RETRY_POLICY`) and
    ``connect_timeout_s`` bound how long that takes; by default Celery's settings
    (``task_publish_retry_policy``, ``broker_connection_timeout``) apply."""

    def __init__(
        self,
        app: Celery,
        *,
        retry_policy: Mapping[str, float] | None = None,
        connect_timeout_s: float | None = None,
    ) -> None:
        self.app = app
        self.retry_policy = dict(retry_policy) if retry_policy is not None else None
        self.connect_timeout_s = connect_timeout_s
        self._held = threading.local()
        self._holders = Holders(DEFAULT_HELD_PRODUCERS)

    @classmethod
    def fail_fast(cls, app: Celery) -> Publisher:
        """A publisher for a caller that waits on the publish (a client): it gives up within
        a few seconds when the broker cannot be reached."""
        return cls(
            app,
            retry_policy=FAIL_FAST_RETRY_POLICY,
            connect_timeout_s=FAIL_FAST_CONNECT_TIMEOUT_S,
        )

    def _send(
        self,
        name: str,
        run_id: str,
        kwargs: dict[str, Any],
        *,
        countdown: float | None = None,
        soft_time_limit: float | None = None,
        time_limit: float | None = None,
    ) -> None:
        """:meth:`_send_message`, with the broker's connection errors reported as
        :class:`~warrant.runner.errors.BrokerUnavailable` for the run."""
        limits = {"soft_time_limit": soft_time_limit, "time_limit": time_limit}
        try:
            self._send_message(name, run_id, kwargs, countdown=countdown, limits=limits)
        except _BROKER_ERRORS as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BrokerUnavailable(
                f"cannot reach the broker ({reason}): run {run_id} is recorded and goes on "
                "once the broker is back (the reconciler's stalled-run sweep re-publishes "
                "its message)",
                run_id=run_id,
            ) from exc

    def _send_message(
        self,
        name: str,
        run_id: str,
        kwargs: dict[str, Any],
        *,
        countdown: float | None,
        limits: dict[str, float | None],
    ) -> None:
        """Build the message with Celery (``app.amqp.create_task_message``) and publish it with
        Celery (``app.amqp.send_task_message``: its signals, events and retry policy).

        What ``Celery.send_task`` adds around those two calls — a registry look-up, the router,
        a result object, a producer from the pool — was a third of a publish's CPU; the queue
        comes from :func:`~warrant.broker.queues.route_task` (the router Celery uses), the
        producer is the thread's own (:meth:`_producer`), and a delayed message
        (``countdown``, a retry's)
        goes through ``send_task`` itself, which also knows delayed delivery on quorum queues.
        ``tests/integration/test_publish.py`` pins that both paths write the same message.

        Stamped with the run id, so ``revoke_by_stamped_headers`` can find every message of a
        run, queued or running. The arguments' display (Flower, logs) is built here: Celery's
        safe repr of them costs about a tenth of a publish."""
        app = self.app
        queue = route_task(name, (), kwargs, {})["queue"]
        if countdown:
            self._send_task(name, run_id, kwargs, queue, countdown=countdown, **limits)
            return
        parent = app.current_worker_task
        parent_id = parent.request.id if parent is not None else None
        message = app.amqp.create_task_message(
            uuid(),
            name,
            (),
            kwargs,
            reply_to=app.thread_oid,
            create_sent_event=app.conf.task_send_sent_event,
            root_id=(parent.request.root_id or parent_id) if parent is not None else None,
            parent_id=parent_id,
            ignore_result=None,
            argsrepr="()",
            kwargsrepr=repr(kwargs),
            **_stamps(run_id, kwargs),
            **limits,
        )
        producer = self._producer()
        if producer is None:  # this thread holds none: one from the pool for this publish
            with app.producer_or_acquire() as pooled:
                self._publish(pooled, name, message, queue)
            return
        try:
            self._publish(producer, name, message, queue)
        except BaseException:
            self._drop_producer()
            raise

    def _publish(self, producer: Any, name: str, message: Any, queue: str) -> None:
        with producer.connection._reraise_as_library_errors():
            self.app.amqp.send_task_message(
                producer,
                name,
                message,
                queue=queue,
                routing_key=queue,
                declare=[] if _declared(producer, queue) else None,
                retry_policy=self.retry_policy,
            )

    def _send_task(
        self, name: str, run_id: str, kwargs: dict[str, Any], queue: str, **options: Any
    ) -> None:
        """Celery's ``send_task``, with this publisher's stamp and display."""
        if self.retry_policy is not None:
            options["retry_policy"] = self.retry_policy
        with (
            self.app.producer_or_acquire() as producer,
            producer.connection._reraise_as_library_errors(),
        ):
            if _declared(producer, queue):
                options["declare"] = []
            self.app.send_task(
                name,
                kwargs=kwargs,
                argsrepr="()",
                kwargsrepr=repr(kwargs),
                producer=producer,
                **_stamps(run_id, kwargs),
                **options,
            )

    def _producer(self) -> Any | None:
        """This thread's producer, on a broker connection of its own, made once (again after
        a fork or a failed publish) and kept: acquiring a producer from the app's pool and
        releasing it for every publish cost a sixth of the publish. kombu re-establishes the
        connection when a publish fails (``retry``).

        At most :data:`DEFAULT_HELD_PRODUCERS` threads of a process hold one of this
        publisher's (a connection each); beyond them, threads publish with a producer from
        the pool, as Celery does, and this returns None for them. Held producers are not the
        pool's, so they never make a thread wait for one."""
        held = self._held
        pid = os.getpid()
        if getattr(held, "pid", None) != pid:  # a new thread, or a fork: nothing held here
            held.pid, held.slot, held.tried = pid, None, False
        if held.slot is None and not held.tried:
            held.tried = True
            if self._holders.take(pid):
                producer = self.app.amqp.Producer(self._connection())
                held.slot = HeldProducer(producer, partial(self._holders.give_back, pid))
        return held.slot.producer if held.slot is not None else None

    def _connection(self) -> Any:
        """A broker connection for this publisher's producer (``connect_timeout_s``: also
        Redis's connect and reply timeouts, a timeout not retried by redis-py itself: kombu's
        retry policy is the one bound)."""
        timeout = self.connect_timeout_s
        if timeout is None:
            return self.app.connection_for_write()
        return self.app.connection_for_write(
            connect_timeout=timeout,
            transport_options={
                "socket_connect_timeout": timeout,
                "socket_timeout": timeout,
                "retry_on_timeout": False,
            },
        )

    def _drop_producer(self) -> None:
        """Close the thread's producer and its connection (a failed publish); the next publish
        makes another."""
        held = self._held
        slot = getattr(held, "slot", None)
        held.slot, held.tried = None, False
        if slot is not None:
            slot.close()

    def planner(self, run_id: str, version: int, *, countdown: float | None = None) -> None:
        """The run's planner step; ``countdown``: not before that many seconds (a model
        retry's wait, spent in the broker, not in a worker)."""
        kwargs = {"run_id": run_id, "version": version}
        self._send(TASK_PLANNER, run_id, kwargs, countdown=countdown)

    def policy(self, run_id: str, version: int) -> None:
        self._send(TASK_POLICY, run_id, {"run_id": run_id, "version": version})

    def tool(
        self,
        *,
        run_id: str,
        version: int,
        command_id: str,
        tool: str,
        soft_time_limit: float,
        time_limit: float,
        countdown: float | None = None,
    ) -> None:
        self._send(
            TASK_TOOL,
            run_id,
            {"run_id": run_id, "version": version, "command_id": command_id, "tool": tool},
            soft_time_limit=soft_time_limit,
            time_limit=time_limit,
            countdown=countdown,
        )

    def poll_jobs(self, run_id: str, *, countdown: float) -> None:
        """The reconciler's job polls, ``countdown`` seconds from now: ``run_id`` has a job
        (a long-running tool's, a sub-run) accepted or still running. Not stamped with the
        run: a cancel must not revoke the poll that cancels the run's job."""
        options: dict[str, Any] = {"queue": RECONCILER_QUEUE, "countdown": countdown}
        if self.retry_policy is not None:
            options["retry_policy"] = self.retry_policy
        try:
            self.app.send_task(TASK_POLL_JOBS, kwargs={"run_id": run_id}, **options)
        except _BROKER_ERRORS as exc:
            raise BrokerUnavailable(
                f"cannot reach the broker ({exc}): the jobs run {run_id} waits on are polled "
                "by the next reconciler sweep",
                run_id=run_id,
            ) from exc

    def revoke_commands(self, command_ids: Sequence[str]) -> None:
        """Interrupt the running attempts of these commands (a parallel step's branches its
        merge cut): SIGUSR1 as for a cancelled run (prefork pool; the threads pool's attempt
        watch sees the cut in its heartbeat)."""
        for command_id in command_ids:
            self.app.control.revoke_by_stamped_headers(
                {COMMAND_HEADER: command_id}, terminate=True, signal="SIGUSR1"
            )

    def revoke_run(self, run_id: str, *, terminate: bool) -> None:
        """Drop the run's queued messages on every worker; with ``terminate``, also interrupt
        its running tool. SIGUSR1 raises ``SoftTimeLimitExceeded`` inside the tool (prefork
        pool), so the tool stops cooperatively and its stage still records what happened."""
        self.app.control.revoke_by_stamped_headers(
            {RUN_HEADER: run_id}, terminate=terminate, signal="SIGUSR1"
        )


def _declared(producer: Any, queue: str) -> bool:
    """Has this producer's connection declared ``queue`` since it (re)connected?

    Celery asks kombu to declare the target queue on every publish, and kombu answers from
    the connection's cache of declared entities (cleared when the connection is
    re-established) — but only after copying the queue and binding the copy to the channel,
    about a fifth of a publish. This is the same cache look-up without the copy (kombu
    identifies a queue by ``hash("Q|" + name)``); when it misses, Celery declares as usual."""
    connection = getattr(producer, "connection", None)
    declared: set[int] | None = getattr(connection, "declared_entities", None)
    return declared is not None and hash(f"Q|{queue}") in declared


class RecordingPublisher:
    """A stand-in for :class:`Publisher` that remembers messages instead of sending them, so
    a caller can drive the stages in one process (``python -m bench.profile``, tests)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def planner(self, run_id: str, version: int, *, countdown: float | None = None) -> None:
        self.sent.append(("planner", {"run_id": run_id, "version": version}))  # at once

    def policy(self, run_id: str, version: int) -> None:
        self.sent.append(("policy", {"run_id": run_id, "version": version}))

    def tool(self, *, run_id: str, version: int, command_id: str, tool: str, **_: Any) -> None:
        self.sent.append(
            ("tool", {"run_id": run_id, "version": version, "command_id": command_id, "tool": tool})
        )

    def poll_jobs(self, run_id: str, *, countdown: float) -> None:
        self.sent.append(("poll_jobs", {"run_id": run_id}))

    def revoke_commands(self, command_ids: Sequence[str]) -> None:
        self.sent.extend(("revoke", {"command_id": c}) for c in command_ids)


class Outbox:
    """Messages to publish once the ledger transaction has committed (never before).

    A message the broker does not take is not a stage failure: what it continues is
    committed, and the reconciler's stalled-run sweep re-publishes it. :meth:`flush` logs a
    warning naming the run and goes on (:func:`log_deferred`)."""

    def __init__(self) -> None:
        self._pending: list[Callable[[], None]] = []

    def add(self, send: Callable[[], None]) -> None:
        self._pending.append(send)

    def flush(self) -> int:
        """Publish the pending messages; returns how many the broker took."""
        sent = 0
        while self._pending:
            send = self._pending.pop(0)
            try:
                send()
            except BrokerUnavailable as exc:
                log_deferred(exc)
                continue
            sent += 1
        return sent


def log_deferred(exc: BrokerUnavailable) -> None:
    """Log a publish that failed after its ledger change committed: a warning, not a stage
    failure (the reconciler's stalled-run sweep re-publishes the message)."""
    log.warning(
        "publish failed after commit for run %s; the reconciler's stalled-run sweep will "
        "re-publish it once the broker is back (%s)",
        exc.run_id,
        exc.__cause__ or exc,
    )


# -- The producers threads keep of their own (:meth:`warrant.broker.publish.Publisher._producer`):
# how many a process may hold, and their release when a thread's locals go.


#: Threads per process that keep a producer on a broker connection of their own (see
#: :meth:`Publisher._producer`); a stage worker's pool child has one thread.
DEFAULT_HELD_PRODUCERS = 4


class Holders:
    """How many threads of each process hold a publisher's producer (a fork starts at
    none)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._count: dict[int, int] = {}

    def take(self, pid: int) -> bool:
        with self._lock:
            if self._count.get(pid, 0) >= self.limit:
                return False
            self._count[pid] = self._count.get(pid, 0) + 1
            return True

    def give_back(self, pid: int) -> None:
        with self._lock:
            self._count[pid] = max(0, self._count.get(pid, 0) - 1)


class HeldProducer:
    """One thread's producer on a broker connection of its own. Closed, and its slot given
    back, by :meth:`close` (a failed publish) or when the thread's locals are dropped (the
    thread ended: an executor's short-lived thread never leaves its connection open)."""

    def __init__(self, producer: Any, give_back: Callable[[], None]) -> None:
        self.producer = producer
        self._give_back: Callable[[], None] | None = give_back

    def close(self) -> None:
        give_back, self._give_back = self._give_back, None
        if give_back is None:
            return
        give_back()
        with contextlib.suppress(Exception):
            connection = self.producer.connection
            self.producer.close()
            connection.close()

    def __del__(self) -> None:
        self.close()
