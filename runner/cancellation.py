"""Whether the run a planner step works for is being cancelled: a signal for planners.

The planner stage binds the run's :class:`CancelSignal` (set by the worker's run watch,
``warrant.broker.planner._run_watch``) around the planner's ``propose``; a planner that waits on
something slow (a model call) asks :func:`current` and gives up when it is set. A planner that
never asks simply finishes its call (its answer is then dropped by the stage's version check,
and its usage still charged)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["CancelSignal", "bound", "current"]


class CancelSignal:
    """Set once the run is being cancelled (or, for a tool call, once the worker interrupts
    it); callbacks run when it is set, and :meth:`wait` wakes."""

    def __init__(self) -> None:
        self._set = False
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._event = threading.Event()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the signal is set (True) or ``timeout`` seconds passed (False)."""
        return self._event.wait(timeout)

    def set(self) -> None:
        with self._lock:
            if self._set:
                return
            self._set, callbacks = True, list(self._callbacks)
        self._event.set()
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one failing callback must not keep the others from running
                logging.getLogger("warrant").warning("a cancel callback failed", exc_info=True)

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when the signal is set (at once if it is); returns the undo."""
        with self._lock:
            if not self._set:
                self._callbacks.append(callback)
                return lambda: self._discard(callback)
        callback()
        return lambda: None

    def _discard(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


_signal: ContextVar[CancelSignal | None] = ContextVar("warrant_run_cancelled", default=None)


@contextmanager
def bound(signal: CancelSignal | None) -> Iterator[None]:
    """``signal`` is the current run's cancel signal inside the block."""
    token = _signal.set(signal)
    try:
        yield
    finally:
        _signal.reset(token)


def current() -> CancelSignal | None:
    """The current run's cancel signal, if a stage bound one."""
    return _signal.get()
