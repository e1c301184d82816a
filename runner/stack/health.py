"""Is this process's way to the broker and the ledger open? (``/healthz``, ``warrant up``.)

Each check runs in a thread of its own with a deadline, so a peer that went silent (no
answer, no reset) makes the check fail after :data:`CHECK_TIMEOUT_S` instead of hanging it.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass
from typing import Any

from warrant.ledger.db import ping

__all__ = ["CHECK_TIMEOUT_S", "Check", "check_broker", "check_database", "health"]

#: How long one check may take before it counts as failed.
CHECK_TIMEOUT_S = 3.0

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="warrant-health")


@dataclass(frozen=True)
class Check:
    ok: bool
    latency_ms: float
    error: str | None = None


def _timed(probe: Any, *, timeout: float) -> Check:
    started = time.monotonic()
    future = _pool.submit(probe)
    try:
        future.result(timeout=timeout)
    except FutureTimeout:
        return Check(False, round(timeout * 1000, 1), f"no answer within {timeout:g} s")
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Check(False, _ms(started), f"{type(exc).__name__}: {first}"[:300])
    return Check(True, _ms(started))


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


def check_database(engine: Any, *, timeout: float = CHECK_TIMEOUT_S) -> Check:
    return _timed(lambda: ping(engine), timeout=timeout)


def check_broker(app: Any, *, timeout: float = CHECK_TIMEOUT_S) -> Check:
    """A fresh connection to the broker (not the publisher's pooled one: it may be a socket
    to a server that is gone), opened and closed."""

    def probe() -> None:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            conn.default_channel  # noqa: B018 - the channel proves the server answered

    return _timed(probe, timeout=timeout)


def health(engine: Any, app: Any) -> dict[str, Any]:
    """``{"status": "ok" | "unavailable", "broker": Check, "database": Check}``."""
    broker, database = check_broker(app), check_database(engine)
    return {
        "status": "ok" if broker.ok and database.ok else "unavailable",
        "broker": asdict(broker),
        "database": asdict(database),
    }
