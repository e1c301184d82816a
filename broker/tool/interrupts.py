"""Cooperative interruption of tool processes (prefork pool children).

A cancel revokes the running tool with ``terminate`` and SIGUSR1: billiard turns that signal
into ``SoftTimeLimitExceeded`` inside the tool, so the tool stops cooperatively and the stage
still records what happened. The signal may arrive at any moment of the task, though, not only
while the tool runs: during the claim or the record, an exception there would leave the
command started without an outcome and the run ``cancelling`` until the reconciler comes. So
the signal only interrupts inside :func:`interruptible` (around the tool's own code); outside,
it is remembered, and a tool that was about to start is interrupted as it starts — if its run
is being cancelled (the ledger says so): any other remembered signal is stray.

A signal belongs to the task it arrived in. :func:`begin` (at the start of every tool task)
forgets whatever came before, and a signal that arrives between tasks (a soft time limit the
pool's parent delivers late, after the task it was meant for has finished) is ignored: it
never fails the next, unrelated task of the process.

Inside the tool's window, the tool's own reads of the ledger (its cancellation check) are
:func:`deferred`: a signal that lands in the middle of a database call would leave the
driver's connection mid-command and the engine's pool half-updated (its next checkout, the
outcome's record, then waits out the pool timeout); it is raised when the read is done.

Once the tool has read that its run is being cancelled (:func:`seen_cancel`, from its
cancellation check), the signal no longer interrupts it: the tool is stopping on its own, and
an interruption now could only replace what it knows (nothing was written) with an unknown
effect — the run would then stay ``cancelling`` until the reconciler came. The attempt's own
deadlines still apply.

The pool, however, remembers that it signalled the child and would treat the child's *next*
death as a controlled termination (the message of whatever task it then runs would be
acknowledged and lost). So a child that received SIGUSR1 leaves after finishing its current
task, and the pool starts a fresh one.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

__all__ = ["begin", "deferred", "install", "interruptible", "postponed", "seen_cancel", "take"]

_fired = False
"""SIGUSR1 arrived since the last :func:`take` (the process must leave after its task)."""
_pending = False
"""It arrived outside :func:`interruptible`: interrupt the next tool as it starts."""
_live = False
"""Inside :func:`interruptible`."""
_in_task = False
"""Between :func:`begin` and :func:`take`: a signal outside that window is ignored."""
_deferring = False
"""Inside :func:`deferred` (within :func:`interruptible`)."""
_postponed = False
"""The attempt's own soft deadline fired inside :func:`deferred`: raised as the block ends."""
_stopping = False
"""The tool read that its run is being cancelled: SIGUSR1 no longer interrupts it."""


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
        if not _in_task:
            return  # between tasks: meant for a task that is over (a late soft time limit)
        _fired = True
        if _stopping:
            return  # the tool saw the cancel and is stopping on its own
        if _live and callable(previous):
            previous(signum, frame)  # billiard's: raises SoftTimeLimitExceeded
        else:
            _pending = True

    handler._warrant = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGUSR1, handler)


def begin() -> None:
    """A tool task starts: forget any signal that arrived before it (meant for another task)."""
    global _fired, _pending, _in_task, _postponed, _stopping
    _fired, _pending, _in_task, _postponed, _stopping = False, False, True, False, False


@contextmanager
def interruptible(*, cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
    """The tool's own code: SIGUSR1 raises ``SoftTimeLimitExceeded`` here (at once on entry
    if it arrived since the task started and ``cancelled()`` confirms the run is being
    cancelled; a failing check counts as cancelled)."""
    global _live, _pending
    if _pending:
        _pending = False
        if _confirmed(cancelled):
            raise SoftTimeLimitExceeded("interrupted before the tool started")
    _live = True
    try:
        yield
    finally:
        _live = False


@contextmanager
def deferred() -> Iterator[None]:
    """Shield a block inside :func:`interruptible` (a ledger read): a signal arriving meanwhile
    is raised as the block ends, not in the middle of it. Outside the window: no effect."""
    global _live, _pending, _deferring, _postponed
    if not _live:
        yield
        return
    _live, _deferring = False, True
    try:
        yield
    finally:
        _live, _deferring = True, False
    cancel, overdue, _pending, _postponed = _pending and not _stopping, _postponed, False, False
    if cancel or overdue:
        raise SoftTimeLimitExceeded("interrupted during the tool's ledger read")


def seen_cancel() -> None:
    """The tool's cancellation check read that the run is being cancelled: the tool stops on
    its own, so the cancel's signal (also one that came during that read) no longer
    interrupts it. The attempt's own deadlines still do."""
    global _stopping
    if _in_task:
        _stopping = True


def postponed() -> bool:
    """Called by another interrupting signal's handler (the attempt's own soft deadline):
    inside :func:`deferred`, remember it (raised as the block ends) and say so."""
    global _postponed
    if _deferring:
        _postponed = True
    return _deferring


def _confirmed(cancelled: Callable[[], bool] | None) -> bool:
    if cancelled is None:
        return True
    try:
        return bool(cancelled())
    except Exception:
        return True


def take() -> bool:
    """Did SIGUSR1 fire in this task? (Resets the flags; the task is over.)"""
    global _fired, _pending, _in_task, _postponed, _stopping
    fired, _fired, _pending, _in_task = _fired, False, False, False
    _postponed = _stopping = False
    return fired
