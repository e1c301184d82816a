"""Fault injectors, each a thread: worker SIGKILLs, Redis and PostgreSQL restarts, duplicate
deliveries of tool messages, and the demo service's own faults (fed one at a time per tool)."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, text

from bench.chaos.servers import TempPostgres, TempRedis
from bench.chaos.specs import FAULT_MIX, service_fault
from bench.chaos.workers import KILL_TARGETS, Supervisor

__all__ = ["FaultLog", "Injectors"]

log = logging.getLogger("chaos")
FAULT_KINDS = ("worker_kill", "redis_restart", "postgres_restart", "duplicate_delivery")
#: The concurrency campaign's (``bench.chaos.concurrency``) extra kinds.
CONCURRENCY_KINDS = ("redis_stall", "cancel_in_io")
#: How long a Redis stall lasts, and how many a campaign makes at most.
STALL_S = 20.0
MAX_STALLS = 2


@dataclass
class FaultLog:
    counts: Counter[str] = field(default_factory=Counter)
    detail: Counter[str] = field(default_factory=Counter)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, what: str, detail: str = "") -> None:
        with self.lock:
            self.counts[kind] += 1
            self.detail[f"{kind}:{what}"] += 1
            self.events.append((time.time(), kind, detail or what))


class Injectors:
    """Starts the injector threads; ``interval_s`` is the pause between two faults of a kind."""

    def __init__(
        self,
        *,
        supervisor: Supervisor,
        redis: TempRedis,
        postgres: TempPostgres,
        engine: Engine,
        publisher: Any,
        interval_s: float,
        rng: random.Random,
        campaign: str | None = None,
    ) -> None:
        self.supervisor, self.redis, self.postgres = supervisor, redis, postgres
        self.engine, self.publisher = engine, publisher
        self.interval_s = interval_s
        self.rng = rng
        self.faults = FaultLog()
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._duplicated: set[tuple[str, int]] = set()
        self.campaign = campaign
        self.kinds = FAULT_KINDS + (CONCURRENCY_KINDS if campaign == "concurrency" else ())

    def start(self) -> None:
        loops: list[tuple[str, Callable[[], None], float]] = [
            ("kill", self._kill_loop, 0.0),
            ("redis", self._redis_loop, self.interval_s / 3),
            ("postgres", self._postgres_loop, 2 * self.interval_s / 3),
            ("duplicate", self._duplicate_loop, 0.0),
            ("service-faults", self._service_fault_loop, 0.0),
        ]
        if self.campaign == "concurrency":
            loops[3] = ("duplicate", self._copies_loop, 0.0)
            loops.append(("redis-stall", self._stall_loop, self.interval_s / 2))
            loops.append(("cancel-in-io", self._cancel_in_io_loop, 1.0))
        for name, fn, offset in loops:
            t = threading.Thread(target=self._guard, args=(fn, offset), name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def halt(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(30)

    def _guard(self, fn: Callable[[], None], offset: float) -> None:
        if self.stop.wait(offset):
            return
        while not self.stop.is_set():
            try:
                fn()
            except Exception as exc:  # an injector must outlive the chaos it causes
                log.debug("injector %s: %s", fn.__name__, exc)
                self.stop.wait(0.5)

    def _pause(self) -> None:
        self.stop.wait(self.interval_s * self.rng.uniform(0.7, 1.3))

    # --- infrastructure ------------------------------------------------------------------

    def _kill_loop(self) -> None:
        n = self.faults.counts["worker_kill"]
        label, what = KILL_TARGETS[n % len(KILL_TARGETS)]
        done = self.supervisor.kill(label, what, self.rng)
        if done is None:
            self.stop.wait(0.5)
            return
        self.faults.add("worker_kill", f"{label}-{what}", done)
        self._pause()

    def _redis_loop(self) -> None:
        self.redis.restart(down_s=self.rng.uniform(0.0, 0.5))
        self.faults.add("redis_restart", "restart")
        self._pause()

    def _postgres_loop(self) -> None:
        mode = "immediate" if self.faults.counts["postgres_restart"] % 2 else "fast"
        self.postgres.restart(mode=mode, down_s=self.rng.uniform(0.0, 0.5))
        self.faults.add("postgres_restart", mode)
        self._pause()

    # --- duplicate delivery ----------------------------------------------------------------

    def _duplicate_loop(self) -> None:
        """Re-publish the exact tool message of a command that is ``started`` and in flight
        (its demo-service call took a ``slow`` fault): the version is the run's, unchanged
        since the policy stage issued the command (the claim does not bump it)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.id, c.run_id, c.tool, c.timeout_s, c.attempts, r.version "
                    "FROM commands c JOIN runs r ON r.id = c.run_id "
                    "JOIN demo_calls d ON d.idempotency_key = c.idempotency_token "
                    "WHERE c.status = 'started' AND r.status = 'running' "
                    "AND d.fault IN ('slow', 'slow_after_commit') "
                    "AND d.created_at > now() - interval '20 seconds'"
                )
            ).all()
        for cid, run_id, tool, timeout_s, attempts, version in rows:
            if (cid, attempts) in self._duplicated:
                continue
            self._duplicated.add((cid, attempts))
            self._send_again(cid, run_id, tool, timeout_s, version, times=1)
            self.faults.add("duplicate_delivery", tool, f"{tool}:{cid}:attempt{attempts}")
        self.stop.wait(0.15)

    def _send_again(
        self, cid: str, run_id: str, tool: str, timeout_s: float, version: int, *, times: int
    ) -> None:
        """The command's tool message, exactly as the policy stage sent it, ``times`` more."""
        for _ in range(times):
            self.publisher.tool(
                run_id=run_id,
                version=version,
                command_id=cid,
                tool=tool,
                soft_time_limit=timeout_s,
                time_limit=timeout_s + 5.0,
            )

    def _copies_loop(self) -> None:
        """The concurrency campaign: every command's tool message 2-5 times in all, sent at
        once while the command waits in its queue or runs (the threaded tool worker's threads
        take the copies together)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.id, c.run_id, c.tool, c.timeout_s, r.version "
                    "FROM commands c JOIN runs r ON r.id = c.run_id "
                    "WHERE c.status IN ('issued', 'started') AND r.status = 'running' "
                    "AND c.created_at > now() - interval '30 seconds'"
                )
            ).all()
        for cid, run_id, tool, timeout_s, version in rows:
            if (cid, 0) in self._duplicated:
                continue
            self._duplicated.add((cid, 0))
            self._send_again(cid, run_id, tool, timeout_s, version, times=self.rng.randint(1, 4))
            self.faults.add("duplicate_delivery", tool, f"{tool}:{cid}")
        self.stop.wait(0.1)

    def _cancel_in_io_loop(self) -> None:
        """Cancel a run whose call is blocked in the service's ``slow`` statement (a socket
        read) right now: what cancel-to-stop is measured on."""
        from warrant.runner.client.api import Client

        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.run_id FROM demo_calls d "
                    "JOIN commands c ON c.idempotency_token = d.idempotency_key "
                    "JOIN runs r ON r.id = c.run_id "
                    "WHERE d.fault = 'slow' AND d.finished_at IS NULL AND r.status = 'running' "
                    "AND d.created_at > now() - interval '1 second' LIMIT 2"
                )
            ).all()
        client = Client(engine=self.engine, publisher=self.publisher)
        for (run_id,) in rows:
            with contextlib.suppress(Exception):
                client.cancel(run_id, by="chaos", reason="cancel while blocked in I/O")
                self.faults.add("cancel_in_io", "slow", run_id)
        self.stop.wait(self.interval_s / 4)

    def _stall_loop(self) -> None:
        if self.faults.counts["redis_stall"] >= MAX_STALLS:
            self.stop.wait(1.0)
            return
        self.redis.stall(STALL_S)
        self.faults.add("redis_stall", f"{STALL_S:.0f}s")
        self.stop.wait(self.interval_s * 4)

    # --- the demo service's faults ---------------------------------------------------------

    def _service_fault_loop(self) -> None:
        """One pending fault per tool at a time (the service keeps one row per tool): a new
        one only once the last was consumed, so none is overwritten unseen."""
        from warrant_demo.service import DemoService

        demo = DemoService(self.engine)
        with self.engine.connect() as conn:
            pending = {
                t for (t,) in conn.execute(text("SELECT tool FROM demo_faults WHERE remaining > 0"))
            }
        for tool in FAULT_MIX:
            if tool not in pending and self.rng.random() < 0.85:
                mode, delay = service_fault(tool, self.rng)
                with contextlib.suppress(Exception):
                    demo.set_fault(tool, mode, delay_s=delay, retry_after_s=0.2)
        self.stop.wait(0.3)
