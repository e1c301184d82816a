"""Worker registrations: which tool set each running worker has (see ``tools._deployment``).

Each worker writes its row when it starts, refreshes it every :data:`HEARTBEAT_S`
(``broker.registration.RegisterWorker``) and removes it when it stops; the policy stage's load
reads the live ones (:func:`live_registrations`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.dialects.postgresql import insert

from warrant.ledger.models import WorkerRegistration
from warrant.tools._deployment import WorkerInfo

__all__ = [
    "CACHE_S",
    "HEARTBEAT_S",
    "LIVE_WITHIN_S",
    "live_registrations",
    "live_workers",
    "register_worker",
    "unregister_worker",
]

#: Seconds between a worker's registration refreshes.
HEARTBEAT_S = 30.0
#: A registration not refreshed for this long belongs to a dead worker.
LIVE_WITHIN_S = 3 * HEARTBEAT_S
#: A registration not refreshed for this long is deleted when another worker starts (a dead
#: worker's row stays visible, as dead, for a while; then it is forgotten).
FORGOTTEN_AFTER_S = 24 * 3600.0
#: How long the policy stage reuses what it read.
CACHE_S = 5.0


def register_worker(
    engine: Engine,
    *,
    process: str,
    node: str,
    roles: Sequence[str],
    queues: Sequence[str],
    fingerprint: str,
    tools: Sequence[str],
    pid: int,
    refresh: bool = False,
) -> None:
    """Record this process's registration. ``refresh`` (the heartbeat) only moves ``seen_at``
    of a row that exists, and inserts the whole row when none does: a worker whose first
    registration failed (the ledger was down at its start) or whose row was pruned is back in
    ``tools check`` and the gate's view at its next heartbeat."""
    values = {
        "process": process,
        "node": node,
        "roles": list(roles),
        "queues": list(queues),
        "fingerprint": fingerprint,
        "tools": list(tools),
        "pid": pid,
    }
    stmt = insert(WorkerRegistration).values(**values)
    moved = (
        {"seen_at": func.now()}
        if refresh
        else {**values, "started_at": func.now(), "seen_at": func.now()}
    )
    with engine.begin() as conn:
        conn.execute(
            stmt.on_conflict_do_update(index_elements=[WorkerRegistration.process], set_=moved)
        )
        if not refresh:  # a worker's start clears the rows of workers long dead
            cutoff = func.now() - timedelta(seconds=FORGOTTEN_AFTER_S)
            conn.execute(delete(WorkerRegistration).where(WorkerRegistration.seen_at < cutoff))


def unregister_worker(engine: Engine, process: str) -> None:
    """Remove this process's registration only (another worker may share its node name)."""
    with engine.begin() as conn:
        conn.execute(delete(WorkerRegistration).where(WorkerRegistration.process == process))


def live_workers(engine: Engine, *, seen_within_s: float) -> list[WorkerInfo]:
    """Workers seen within ``seen_within_s`` (a killed worker's row ages out)."""
    cutoff = func.now() - timedelta(seconds=seen_within_s)
    with engine.connect() as conn:
        rows = conn.execute(
            select(WorkerRegistration)
            .where(WorkerRegistration.seen_at >= cutoff)
            .order_by(WorkerRegistration.node, WorkerRegistration.process)
        ).all()
    return [
        WorkerInfo(
            node=r.node,
            roles=tuple(r.roles),
            queues=tuple(r.queues),
            fingerprint=r.fingerprint,
            tools=frozenset(r.tools),
            process=r.process,
            pid=r.pid,
        )
        for r in rows
    ]


_cache: dict[str, Any] = {"at": float("-inf"), "workers": []}
_lock = threading.Lock()


def live_registrations(engine: Engine) -> list[WorkerInfo]:
    """The live workers' registrations (cached for :data:`CACHE_S`)."""
    with _lock:
        if time.monotonic() - _cache["at"] > CACHE_S:
            _cache["workers"] = live_workers(engine, seen_within_s=LIVE_WITHIN_S)
            _cache["at"] = time.monotonic()
        return list(_cache["workers"])
