"""Cooperative interruption of tool processes (prefork pool children).

A cancel revokes the running tool with ``terminate`` and SIGUSR1: billiard turns that signal
into ``SoftTimeLimitExceeded`` inside the tool, so the tool stops cooperatively and the stage
still records what happened. The signal may arrive at any moment of the task, though, not only
while the tool runs: during the claim or the record, an exception there would leave the
command started without an outcome and the run ``cancelling`` until the reconciler comes. So
the signal only interrupts inside :func:`interruptible` (around the tool's own code); outside,
it is remembered, and a tool that was about to start is interrupted as it starts.

The pool, however, remembers that it signalled the child and would treat the child's *next*
death as a controlled termination (the message of whatever task it then runs would be
acknowledged and lost). So a child that received SIGUSR1 leaves after finishing its current
task, and the pool starts a fresh one.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

__all__ = ["install", "interruptible", "take"]

_fired = False
"""SIGUSR1 arrived since the last :func:`take` (the process must leave after its task)."""
_pending = False
"""It arrived outside :func:`interruptible`: interrupt the next tool as it starts."""
_live = False
"""Inside :func:`interruptible`."""


def install() -> None:
    """Wrap the process's SIGUSR1 handler: remember that it fired, and interrupt only inside
    :func:`interruptible`. Idempotent; called at the start of every tool task, because
    billiard sets its own handler after the process initializer has run."""
    if threading.current_thread() is not threading.main_thread():
        return  # threads/solo pools in a thread: no signals here (and no terminate either)
    previous = signal.getsignal(signal.SIGUSR1)
    if getattr(previous, "_warrant", False):
        return

    def handler(signum: int, frame: Any) -> None:
        global _fired, _pending
        _fired = True
        if _live and callable(previous):
            previous(signum, frame)  # billiard's: raises SoftTimeLimitExceeded
        else:
            _pending = True

    handler._warrant = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGUSR1, handler)


@contextmanager
def interruptible() -> Iterator[None]:
    """The tool's own code: SIGUSR1 raises ``SoftTimeLimitExceeded`` here (at once on entry
    if it arrived since the task started)."""
    global _live, _pending
    if _pending:
        _pending = False
        raise SoftTimeLimitExceeded("interrupted before the tool started")
    _live = True
    try:
        yield
    finally:
        _live = False


def take() -> bool:
    """Did SIGUSR1 fire since the last call? (Resets the flags.)"""
    global _fired, _pending
    fired, _fired, _pending = _fired, False, False
    return fired
