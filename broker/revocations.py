"""Keep each worker's memory of revoked runs bounded.

A cancel revokes every message of a run with ``revoke_by_stamped_headers`` (see
:meth:`warrant.broker.publish.Publisher.revoke_run`). Celery keeps those stamps in a plain list per
header, in every worker, for the worker's lifetime, and checks each incoming stamped message
against the whole list: memory and per-message cost grow with every cancellation. This worker
step trims the list to the most recent ``revoked_runs_kept`` runs, every
:data:`TRIM_INTERVAL_S`. Forgetting an old revocation is safe: a stage never acts on a
cancelled run's message (its compare-and-set on the run's version fails and it is ignored);
the revocation only spares the queue that work and interrupts a running tool at once.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps
from celery.worker import state as worker_state

from warrant.broker.publish import RUN_HEADER

__all__ = ["TRIM_INTERVAL_S", "TrimRevokedRuns", "trim_revoked_runs"]

#: Seconds between trims.
TRIM_INTERVAL_S = 30.0


def trim_revoked_runs(keep: int, revoked: dict[str, Any] | None = None) -> int:
    """Keep the ``keep`` most recently revoked runs; returns how many were forgotten."""
    revoked = worker_state.revoked_stamps if revoked is None else revoked
    stamps = revoked.get(RUN_HEADER)
    if not isinstance(stamps, list) or len(stamps) <= keep:
        return 0  # (repeats are only dropped once the list is over the bound)
    distinct = list(dict.fromkeys(reversed(stamps)))  # newest first, without repeats
    revoked[RUN_HEADER] = distinct[:keep][::-1]
    return max(0, len(distinct) - keep)


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
