"""Which runs waiting on a planner in this process are being cancelled: one query per
interval for all of them.

A planner step binds its run's :class:`~warrant.runner.cancellation.CancelSignal` while it
asks the planner (``broker.planner.stage``); one watch thread per process asks the ledger,
every ``WARRANT_LEASE_HEARTBEAT_S``, which of the runs being waited on are ``cancelling`` or
``cancelled`` (one statement however many calls are in flight), and sets their signals: an
OpenAI-compatible call is then cancelled (``runner.planners._model_http``). Bound: one interval. A
failed query is logged and tried again at the next interval (a call just goes on waiting)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine

from warrant.ledger.commands import cancelled_among
from warrant.ledger.stage_loads import autocommit
from warrant.runner.cancellation import CancelSignal

__all__ = ["RunWatch", "the_run_watch"]

log = logging.getLogger("warrant.planner")


class RunWatch:
    def __init__(self, engine: Engine, *, every_s: float) -> None:
        self.engine, self.every_s = engine, every_s
        self.pid = os.getpid()
        self.waiting: dict[str, list[CancelSignal]] = {}
        self.cond = threading.Condition()
        threading.Thread(target=self._loop, name="warrant-run-watch", daemon=True).start()

    @contextmanager
    def watching(self, run_id: str) -> Iterator[CancelSignal]:
        signal = CancelSignal()
        with self.cond:
            if not self.waiting:
                self.cond.notify()
            self.waiting.setdefault(run_id, []).append(signal)
        try:
            yield signal
        finally:
            with self.cond:
                signals = self.waiting.get(run_id, [])
                if signal in signals:
                    signals.remove(signal)
                if not signals:
                    self.waiting.pop(run_id, None)

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.waiting:
                    self.cond.wait()  # woken by the first run watched
                # a full interval whatever is watched meanwhile: a notify per step would make
                # it one query per step (at N in flight, a query per model call)
                until = time.monotonic() + self.every_s
                while (left := until - time.monotonic()) > 0:
                    self.cond.wait(left)
                ids = list(self.waiting)
            if not ids:
                continue
            try:
                with autocommit(self.engine, held=False) as conn:
                    cancelled = cancelled_among(conn, ids)
            except Exception as exc:
                log.warning("checking %d waiting run(s) for cancels failed: %s", len(ids), exc)
                continue
            with self.cond:
                signals = [s for run_id in cancelled for s in self.waiting.get(run_id, [])]
            for signal in signals:
                signal.set()


_watch: RunWatch | None = None
_lock = threading.Lock()


def the_run_watch(engine: Engine, *, every_s: float) -> RunWatch:
    """This process's run watch (one per process; a forked child starts its own)."""
    global _watch
    with _lock:
        if _watch is None or _watch.pid != os.getpid() or _watch.engine is not engine:
            _watch = RunWatch(engine, every_s=every_s)
        return _watch
