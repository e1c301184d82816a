"""Publishing stage messages. A message carries ids and the expected version, nothing else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery

from broker.queues import TASK_PLANNER, TASK_POLICY, TASK_TOOL, route_task

__all__ = ["Outbox", "Publisher", "RecordingPublisher"]

RUN_HEADER = "warrant_run_id"


class Publisher:
    def __init__(self, app: Celery) -> None:
        self.app = app

    def _send(self, name: str, run_id: str, kwargs: dict[str, Any], **options: Any) -> None:
        # Stamped with the run id, so `revoke_by_stamped_headers` can find every message of a
        # run, queued or running.
        # The arguments' display (Flower, logs) is built here: Celery's safe repr of them costs
        # about a tenth of a publish.
        queue = route_task(name, (), kwargs, options)["queue"]
        with self.app.producer_or_acquire() as producer:
            if _declared(producer, queue):
                options["declare"] = []
            self.app.send_task(
                name,
                kwargs=kwargs,
                argsrepr="()",
                kwargsrepr=repr(kwargs),
                stamped_headers=[RUN_HEADER],
                producer=producer,
                **{RUN_HEADER: run_id},
                **options,
            )

    def planner(self, run_id: str, version: int) -> None:
        self._send(TASK_PLANNER, run_id, {"run_id": run_id, "version": version})

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

    def planner(self, run_id: str, version: int) -> None:
        self.sent.append(("planner", {"run_id": run_id, "version": version}))

    def policy(self, run_id: str, version: int) -> None:
        self.sent.append(("policy", {"run_id": run_id, "version": version}))

    def tool(self, *, run_id: str, version: int, command_id: str, tool: str, **_: Any) -> None:
        self.sent.append(
            ("tool", {"run_id": run_id, "version": version, "command_id": command_id, "tool": tool})
        )


class Outbox:
    """Messages to publish once the ledger transaction has committed (never before)."""

    def __init__(self) -> None:
        self._pending: list[Callable[[], None]] = []

    def add(self, send: Callable[[], None]) -> None:
        self._pending.append(send)

    def flush(self) -> int:
        sent = 0
        while self._pending:
            self._pending.pop(0)()
            sent += 1
        return sent
