"""The attempt ends itself at its time limits: the one-live-attempt lease needs no parent.

Celery's soft and hard time limits are timers of the prefork pool's *parent*, kept in its event
loop; while that loop is blocked (a synchronous broker call to an unreachable Redis, a stopped
process) neither fires, and an attempt runs past its lease while another host's delivery,
judging the lease by the database's clock, starts a second one. So the pool process enforces
its own limits, counted on its own monotonic clock from the moment the tool stage began
(before the claim, so before the database's ``started_at``: the child's deadline always falls
inside the lease):

- at the **soft** limit (the command's ``timeout_s``, plus :data:`SOFT_LIMIT_LAG_S` so that
  the parent's own soft limit comes first while it works) ``SIGALRM`` raises
  ``SoftTimeLimitExceeded`` inside the tool, exactly as the parent's soft limit does: a read
  fails, a write is ``unknown`` (``TOOL_TIMEOUT``), and the attempt records that itself;
- at the **hard** limit (``timeout_s`` + ``HARD_LIMIT_GRACE_S``), if the tool is still running
  (it swallowed the exception, or is stuck where no signal reaches it), a watchdog thread ends
  the process with ``os._exit`` — what the parent's hard limit would have done: the attempt
  records nothing, and the lease (a delivery, or the reconciler's stale sweep) records it lost
  (``unknown`` for a write, the read run again).

Only inside a Celery tool task (:func:`enforced`) and on the main thread: a stage driven in a
test process or a thread is never killed. A process stopped by the kernel (``SIGSTOP``) or a
tool holding the GIL in C code cannot be ended from inside; only the lease covers those.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from warrant.broker.tool import interrupts

__all__ = ["HARD_LIMIT_EXIT", "SOFT_LIMIT_LAG_S", "concurrent", "enforced", "own_deadline"]

log = logging.getLogger("warrant.tool")

#: Exit status of a pool process that ended itself at an attempt's hard time limit.
HARD_LIMIT_EXIT = 70
#: The pool process's own soft limit fires this long after the parent's (Celery's
#: ``soft_time_limit``): while the parent's timers work, its signal alone interrupts the tool,
#: never two asynchronous exceptions a few milliseconds apart (the second one landed inside
#: the first one's handling, and an attempt ran on to its hard limit: ``test_probe_11`` on
#: RabbitMQ). The child's alarm is the fallback for a parent that cannot fire.
SOFT_LIMIT_LAG_S = 0.5


class _Task(threading.local):
    enforce = False
    """Inside a Celery tool task (:func:`enforced`), in this thread."""


_task = _Task()
_armed = False
"""The soft-limit alarm is meant for the running tool."""


@contextmanager
def enforced() -> Iterator[None]:
    """A Celery tool task: tools called in it run under :func:`own_deadline`."""
    _task.enforce = True
    try:
        yield
    finally:
        _task.enforce = False


def concurrent() -> bool:
    """A Celery tool task on a threads pool (not the process's main thread): its limits and
    lease are :mod:`warrant.broker.tool._attempt_watch`'s, not this module's."""
    return _task.enforce and threading.current_thread() is not threading.main_thread()


class _Watchdog:
    """One thread per process, waiting for the hard deadline of the tool being called."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.deadline: float | None = None
        self.what = ""
        threading.Thread(target=self._watch, name="warrant-deadline", daemon=True).start()

    def _watch(self) -> None:
        with self.cond:
            while True:
                if self.deadline is None:
                    self.cond.wait()
                    continue
                left = self.deadline - time.monotonic()
                if left <= 0:
                    log.critical("%s outlived its hard time limit: ending this process", self.what)
                    os._exit(HARD_LIMIT_EXIT)
                self.cond.wait(left)

    def arm(self, deadline: float | None, what: str = "") -> None:
        with self.cond:
            self.deadline, self.what = deadline, what
            self.cond.notify()


_watchdog: _Watchdog | None = None


def _the_watchdog() -> _Watchdog:
    global _watchdog
    if _watchdog is None or _watchdog.pid != os.getpid():  # a forked child starts its own
        _watchdog = _Watchdog()
    return _watchdog


def _on_alarm(signum: int, frame: Any) -> None:
    if _armed and not interrupts.postponed():  # not in the middle of a ledger read
        raise SoftTimeLimitExceeded("soft time limit exceeded (the attempt's own deadline)")


@contextmanager
def own_deadline(*, soft_at: float, hard_at: float, what: str) -> Iterator[None]:
    """The tool's call, ended at ``soft_at`` (an exception) and ``hard_at`` (the process),
    both ``time.monotonic()`` instants. Does nothing outside :func:`enforced` or off the main
    thread."""
    global _armed
    if not _task.enforce or threading.current_thread() is not threading.main_thread():
        yield
        return
    watchdog = _the_watchdog()
    watchdog.arm(hard_at, what)
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    _armed = True
    signal.setitimer(signal.ITIMER_REAL, max(soft_at - time.monotonic(), 0.001))
    try:
        yield
    finally:
        _armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        watchdog.arm(None)
