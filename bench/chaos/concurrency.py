"""The concurrency campaign (``make chaos CHAOS_ARGS="--campaign concurrency"``, issue 47).

The base suite's faults (SIGKILLs of every role's processes, Redis and PostgreSQL restarts,
cancels, the demo service's faults) with the threads pools under what they are for: hundreds of
runs in flight (each first waits 2-4.5 s in a read), every tool message of a command delivered
2-5 times to the threaded tool worker, a 20 s Redis stall (``SIGSTOP``), and a shared cap on
``issue_refund`` (5 in flight).
Besides the checker's lost / duplicated / unexpected / unresolved it measures, from the demo
service's own record of each call (``demo_calls``: start and end) and the ledger:

``second_live_attempts``  two calls with one idempotency key served at the same time (of the
                          calls the service saw end: a call whose process was killed has no
                          end on record)
``false_worker_lost``     ``WORKER_LOST_DURING_EXECUTION`` recorded while the attempt it
                          declared lost was still being served
``over_cap``              the most ``issue_refund`` calls served at once, less the cap (> 0
                          fails; an abandoned call counts until the service ends it)
``cancel_to_stop_p95_s``  from ``cancel.requested`` to the command's end, for calls blocked in
                          the service's ``slow`` statement (a socket read) at the cancel
``unacked_max_age_s``     the oldest unacknowledged message Redis held, sampled every second:
                          a live worker renews its messages every 5 s, so this is how long a
                          dead worker's messages waited (fails past 60 s)
"""

from __future__ import annotations

import itertools
import json
import statistics
import threading
from typing import Any

import redis
from sqlalchemy import Engine, text

__all__ = ["CAP", "CAPPED_TOOL", "WAIT_MS", "UnackedProbe", "campaign_env", "measure", "verdict"]

CAPPED_TOOL = "issue_refund"
CAP = 5
#: Each run first waits this long (ms) in a read (``wait_read``, whose limit is 5 s), so that
#: hundreds are in flight at once.
WAIT_MS = (2_000, 4_500)
#: What the campaign must show (the issue's done-when).
MAX_CANCEL_TO_STOP_P95_S = 2.0
MAX_UNACKED_AGE_S = 60.0


def campaign_env() -> dict[str, str]:
    """The deployment's settings for the campaign: the shared cap."""
    return {"WARRANT_TOOL_LIMITS": json.dumps({CAPPED_TOOL: {"max_in_flight": CAP}})}


class UnackedProbe:
    """Samples, every second, how old the oldest unacknowledged message in Redis is (on the
    Redis server's clock, as the transport scores them)."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.max_age_s = 0.0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="unacked-probe", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(5)

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                oldest = self.client.zrange("unacked_index", 0, 0, withscores=True)
                seconds, micros = self.client.time()
            except redis.RedisError:
                continue  # restarted or stalled: the next sample
            self.samples += 1
            if oldest:
                age = seconds + micros / 1e6 - float(oldest[0][1])
                self.max_age_s = max(self.max_age_s, age)


def _peak(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def measure(engine: Engine) -> dict[str, Any]:
    """The campaign's figures, from the service's calls and the ledger (see the module)."""
    with engine.connect() as conn:
        calls = conn.execute(
            text(
                "SELECT tool, idempotency_key, fault, extract(epoch from created_at), "
                "extract(epoch from finished_at) FROM demo_calls WHERE finished_at IS NOT NULL"
            )
        ).all()
        lost = conn.execute(
            text(
                "SELECT c.idempotency_token, extract(epoch from o.created_at) FROM outcomes o "
                "JOIN commands c ON c.id = o.command_id "
                "WHERE o.code = 'WORKER_LOST_DURING_EXECUTION'"
            )
        ).all()
        cancels = conn.execute(
            text(
                "SELECT c.idempotency_token, extract(epoch from e.created_at), "
                "extract(epoch from c.finished_at) FROM trace_events e "
                "JOIN commands c ON c.run_id = e.run_id "
                "WHERE e.event = 'cancel.requested' AND c.finished_at IS NOT NULL "
                "AND c.started_at < e.created_at"
            )
        ).all()
    by_key: dict[str, list[tuple[float, float, str | None]]] = {}
    tool_of: dict[str, str] = {}
    for tool, key, fault, start, end in calls:
        if key:
            by_key.setdefault(key, []).append((float(start), float(end), fault))
            tool_of[key] = tool
    overlapping: list[dict[str, Any]] = []
    for key, spans in by_key.items():
        spans.sort()
        overlapping += [
            {"tool": tool_of[key], "key": key[:16], "first": a, "second": b}
            for a, b in itertools.pairwise(spans)
            if b[0] < a[1]
        ]
    false_lost = sum(
        1
        for key, at in lost
        if any(start < float(at) < end for start, end, _ in by_key.get(key, []))
    )
    capped = [(float(s), float(e)) for tool, _k, _f, s, e in calls if tool == CAPPED_TOOL]
    stops = [
        float(end) - float(asked)
        for key, asked, end in cancels
        if any(
            fault == "slow" and start < float(asked) < stop
            for start, stop, fault in by_key.get(key, [])
        )
    ]
    in_a_call = sum(
        1
        for key, asked, _end in cancels
        if any(start < float(asked) < stop for start, stop, _f in by_key.get(key, []))
    )
    p95 = (
        statistics.quantiles(stops, n=20, method="inclusive")[-1]
        if len(stops) > 1
        else (stops or [0.0])[0]
    )
    return {
        "second_live_attempts": len(overlapping),
        "second_live_attempt_examples": overlapping[:5],
        "false_worker_lost": false_lost,
        "capped_tool_peak": _peak(capped),
        "cap": CAP,
        "over_cap": max(0, _peak(capped) - CAP),
        "cancels_of_a_started_command": len(cancels),
        "cancels_in_a_service_call": in_a_call,
        "cancels_in_a_socket_read": len(stops),
        "cancel_to_stop_p95_s": round(p95, 3),
        "cancel_to_stop_max_s": round(max(stops), 3) if stops else None,
    }


def verdict(figures: dict[str, Any]) -> bool:
    return (
        figures["second_live_attempts"] == 0
        and figures["false_worker_lost"] == 0
        and figures["over_cap"] == 0
        and figures["cancel_to_stop_p95_s"] <= MAX_CANCEL_TO_STOP_P95_S
        and figures["unacked_max_age_s"] <= MAX_UNACKED_AGE_S
    )
