"""Cooperative interruption of tool processes (prefork pool children).

A cancel revokes the running tool with ``terminate`` and SIGUSR1: billiard turns that signal
into ``SoftTimeLimitExceeded`` inside the tool, so the tool stops cooperatively and the stage
still records what happened. The pool, however, remembers that it signalled the child and
would treat the child's *next* death as a controlled termination (the message of whatever
task it then runs would be acknowledged and lost). So a child that received SIGUSR1 leaves
after finishing its current task, and the pool starts a fresh one.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["install", "take"]

_fired = False


def install() -> None:
    """Wrap the process's SIGUSR1 handler to remember that it fired. Idempotent; called at
    the start of every tool task, because billiard sets its own handler after the
    process initializer has run."""
    if threading.current_thread() is not threading.main_thread():
        return  # threads/solo pools in a thread: no signals here (and no terminate either)
    previous = signal.getsignal(signal.SIGUSR1)
    if getattr(previous, "_warrant", False):
        return

    def handler(signum: int, frame: Any) -> None:
        global _fired
        _fired = True
        if callable(previous):
            previous(signum, frame)

    handler._warrant = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGUSR1, handler)


def take() -> bool:
    """Did SIGUSR1 fire since the last call? (Resets the flag.)"""
    global _fired
    fired, _fired = _fired, False
    return fired
