"""Tool attempts on a threads pool: their lease is a heartbeat, their limits are the watch's.

A prefork attempt is ended by its pool's hard time limit (and by itself, ``broker.tool.deadline``),
so its lease is its time limit. Nothing kills one thread of a process, so an attempt on the
``tool`` role's threads pool holds a lease that its worker renews instead: one
:class:`AttemptWatch` thread per process

- **beats** every ``WARRANT_LEASE_HEARTBEAT_S``: one statement renews ``heartbeat_at`` of
  every attempt the process runs (``ledger.commands.beat_commands``) and returns their runs'
  statuses. Other deliveries and the reconciler presume an attempt lost only once its
  heartbeat is older than ``WARRANT_LEASE_HEARTBEAT_TIMEOUT_S`` (by the database's clock);
- **cancels**: an attempt whose run is ``cancelling`` gets ``SoftTimeLimitExceeded`` raised
  in its thread (``PyThreadState_SetAsyncExc``) while it is inside the tool's own code — the
  same exception a prefork tool gets from a revoke or a soft time limit, so the stage
  records ``CANCELLED_DURING_EXECUTION`` the same way — and its context's ``interrupt``
  signal set, which wakes ``ToolContext.sleep`` and shuts down the connections of
  :mod:`warrant.tools.blocking` (a thread blocked in a socket read sees no raised exception
  until it runs Python code again). Bound: one beat. A call still inside the tool
  :data:`UNREACHED_AFTER_S` after its interruption blocks where nothing reaches (a plain
  sleep, C code, its own socket): logged, and traced with its outcome
  (``tool.interrupt.unreached``); such a tool belongs on the process pool;
- **times out**: at the soft limit (the command's ``timeout_s``) the same exception;
- **retires** its process when an attempt is still inside the tool at its hard limit (it
  ignored the exception or is stuck where none reaches it): the process stops taking work
  (warm shutdown), keeps beating for the stuck attempt while the others finish, then exits
  with :data:`~warrant.broker.tool.deadline.HARD_LIMIT_EXIT`; only then does the stuck attempt's
  heartbeat stop and its lease end. A tool that cannot be interrupted declares
  ``isolation="process"`` and runs on prefork instead;
- **fences** itself: an attempt whose heartbeat could not be renewed for half the timeout
  (the database is unreachable from here) is interrupted, and if it is still in the tool
  :data:`FENCE_MARGIN_S` before the others may presume it lost, the process exits. Times are
  this process's monotonic clock from the moment a beat (or the claim) was *sent*, which the
  database's ``now()`` in it can only follow: a live attempt is never presumed lost.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import Engine

from warrant.broker.tool.deadline import HARD_LIMIT_EXIT
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.commands import beat_commands
from warrant.ledger.stage_loads import autocommit
from warrant.runner.cancellation import CancelSignal

__all__ = [
    "FENCE_MARGIN_S",
    "UNREACHED_AFTER_S",
    "AttemptWatch",
    "cancel_interrupts",
    "in_tool",
    "live_here",
    "seen_cancel",
    "taken_here",
    "the_watch",
    "this_attempt",
]

log = logging.getLogger("warrant.tool")

#: The process ends this long before the others may presume its unrenewed attempts lost.
FENCE_MARGIN_S = 2.0
#: A call still inside its tool this long after its interruption is reported: it blocks where
#: no interruption reaches.
UNREACHED_AFTER_S = 2.0
_CANCELLED = frozenset({"cancelling", "cancelled"})


@dataclass(eq=False)
class Attempt:
    command_id: str
    run_id: str
    what: str
    soft_at: float
    hard_at: float
    renewed: float
    """Monotonic instant the last renewal (or the claim) was sent: the lease runs from here."""
    thread_id: int = field(default_factory=threading.get_ident)
    in_tool: bool = False
    interrupted: str | None = None
    """Why the attempt was interrupted (``deadline``, ``cancel``, ``fence``), if it was."""
    saw_cancel: bool = False
    """The tool read that its run is being cancelled: it stops on its own (no cancel raise)."""
    signal: CancelSignal = field(default_factory=CancelSignal)
    """The call's ``ToolContext.interrupt``: set with the interruption."""
    interrupted_at: float | None = None
    """Monotonic instant of the interruption, if any."""
    left_tool_at: float | None = None
    """Monotonic instant the call left the tool's code, if it has."""
    reported: bool = False
    """Its outliving an interruption was logged."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def unreached(self) -> dict[str, object] | None:
        """The trace of a call that outlived its interruption by more than
        :data:`UNREACHED_AFTER_S` (None: it stopped in time, or was never interrupted)."""
        if self.interrupted_at is None or self.left_tool_at is None:
            return None
        late = self.left_tool_at - self.interrupted_at
        if late < UNREACHED_AFTER_S:
            return None
        return {"why": self.interrupted, "late_s": round(late, 3)}


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in the thread at its next bytecode (None: withdraw a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


class AttemptWatch:
    """The watch of one worker process (see the module docstring)."""

    def __init__(self, engine: Engine, worker: str, *, beat_s: float, timeout_s: float) -> None:
        self.engine, self.worker = engine, worker
        self.beat_s, self.timeout_s = beat_s, timeout_s
        self.attempts: dict[str, Attempt] = {}
        self.cond = threading.Condition()
        self.retiring = False
        self.wake_at = 0.0
        """Monotonic instant the watch's loop will wake at (0 while it is awake): an attempt
        that begins wakes it only if its soft limit comes sooner (one wake per attempt made
        the loop walk every attempt at each start and end: quadratic in the attempts)."""
        self.pid = os.getpid()
        self.beat_due = threading.Event()
        threading.Thread(target=self._loop, name="warrant-attempt-watch", daemon=True).start()
        # Beats block on the database (a cut network: connect and read timeouts of tens of
        # seconds); the watch's own loop never does, so its fence fires on time.
        threading.Thread(target=self._beater, name="warrant-attempt-beat", daemon=True).start()

    # --- the attempt's side ---------------------------------------------------------------

    @contextmanager
    def watching(
        self, *, command_id: str, run_id: str, began: float, timeout_s: float
    ) -> Iterator[Attempt]:
        """The attempt is this thread's from the claim (``began``: before it was sent) until
        its outcome is recorded; its hard limit is its pool's (``HARD_LIMIT_GRACE_S`` later)."""
        attempt = Attempt(
            command_id=command_id,
            run_id=run_id,
            what=f"attempt of command {command_id}",
            soft_at=began + timeout_s,
            hard_at=began + timeout_s + HARD_LIMIT_GRACE_S,
            renewed=began,
        )
        with self.cond:
            self.attempts[command_id] = attempt
            if attempt.soft_at < self.wake_at:  # else the watch wakes in time anyway
                self.cond.notify()
        _current.attempt = attempt
        try:
            yield attempt
        finally:
            _current.attempt = None
            with self.cond:  # an attempt that ends never makes the next wake earlier
                if self.attempts.get(command_id) is attempt:
                    del self.attempts[command_id]

    def live(self, command_id: str) -> bool:
        with self.cond:
            return command_id in self.attempts

    # --- the watch's side -----------------------------------------------------------------

    def _loop(self) -> None:
        next_beat = time.monotonic()
        while True:
            with self.cond:
                self.wake_at = self._next_wake(next_beat)
                timeout = self.wake_at - time.monotonic()
                if timeout > 0:
                    self.cond.wait(timeout)
                self.wake_at = 0.0  # awake: a new attempt's limit is seen at the next turn
                attempts = list(self.attempts.values())
            now = time.monotonic()
            if not attempts:
                next_beat = now + self.beat_s
                continue
            if now >= next_beat:
                next_beat = now + self.beat_s
                self.beat_due.set()  # a beat still under way skips this one
            self._enforce(attempts, time.monotonic())

    def _beater(self) -> None:
        while True:
            self.beat_due.wait()
            self.beat_due.clear()
            with self.cond:
                attempts = list(self.attempts.values())
            if attempts:
                self._beat(attempts, sent=time.monotonic())

    def _next_wake(self, next_beat: float) -> float:
        if not self.attempts:
            return time.monotonic() + 3600.0
        now = time.monotonic()
        ahead = [t for a in self.attempts.values() for t in (a.soft_at, a.hard_at) if t > now]
        ahead += [
            a.interrupted_at + UNREACHED_AFTER_S
            for a in self.attempts.values()
            if a.interrupted_at is not None
            and not a.reported
            and a.interrupted_at + UNREACHED_AFTER_S > now
        ]
        return min([next_beat, *ahead])

    def _beat(self, attempts: list[Attempt], *, sent: float) -> None:
        try:
            with autocommit(self.engine, held=False) as conn:
                statuses = beat_commands(conn, [a.command_id for a in attempts], worker=self.worker)
        except Exception as exc:  # the database is away: the fence decides (see _enforce)
            log.warning("renewing %d attempt lease(s) failed: %s", len(attempts), exc)
            return
        for a in attempts:
            status = statuses.get(a.command_id)
            if status is None:
                continue  # no longer this worker's attempt: its record will find out
            a.renewed = sent
            if cancel_interrupts(a, status):
                self.interrupt(a, "cancel")

    def _enforce(self, attempts: list[Attempt], now: float) -> None:
        for a in attempts:
            unrenewed = now - a.renewed
            if a.interrupted is None and now >= a.soft_at:
                self.interrupt(a, "deadline")
            if a.interrupted is None and unrenewed >= self.timeout_s / 2:
                self.interrupt(a, "fence")
            if a.in_tool and unrenewed >= self.timeout_s - FENCE_MARGIN_S:
                log.critical("%s could not renew its lease and is still running: exiting", a.what)
                os._exit(HARD_LIMIT_EXIT)
            if a.in_tool and now >= a.hard_at:
                self._retire(a, attempts)
            if (
                a.in_tool
                and not a.reported
                and a.interrupted_at is not None
                and now - a.interrupted_at >= UNREACHED_AFTER_S
            ):
                a.reported = True
                log.warning(
                    "%s is still in its tool %.1f s after its interruption (%s): it blocks where "
                    "no interruption reaches (a plain sleep, C code, a socket of its own); route "
                    "its waits through its ToolContext or run it on the process pool",
                    a.what,
                    now - a.interrupted_at,
                    a.interrupted,
                )

    def interrupt(self, attempt: Attempt, why: str) -> None:
        """``SoftTimeLimitExceeded`` in the attempt's thread, if it is inside the tool."""
        with attempt.lock:
            if attempt.interrupted is not None:
                return
            attempt.interrupted, attempt.interrupted_at = why, time.monotonic()
            if attempt.in_tool:
                log.info("interrupting %s (%s)", attempt.what, why)
                _raise_in(attempt.thread_id, SoftTimeLimitExceeded)
        # Its callbacks unblock the call (shut a socket down, send a database a cancel
        # request): on a thread of their own, so that none can hold up the watch's fence.
        threading.Thread(target=attempt.signal.set, name="warrant-interrupt", daemon=True).start()

    def _retire(self, stuck: Attempt, attempts: list[Attempt]) -> None:
        """A tool outlived its hard limit in this process: take no more work, let the other
        attempts end, then exit (the stuck attempt's lease ends with its heartbeat)."""
        if not self.retiring:
            self.retiring = True
            log.critical("%s outlived its hard time limit: retiring this worker", stuck.what)
            os.kill(self.pid, signal.SIGTERM)  # Celery's warm shutdown: no new messages
        others = [a for a in attempts if a.in_tool is False or time.monotonic() < a.hard_at]
        if not others:
            os._exit(HARD_LIMIT_EXIT)


class _Current(threading.local):
    attempt: Attempt | None = None


_current = _Current()
_watch: AttemptWatch | None = None
_watch_lock = threading.Lock()


def the_watch(engine: Engine, worker: str, *, beat_s: float, timeout_s: float) -> AttemptWatch:
    """This process's watch (one per process; a forked child starts its own)."""
    global _watch
    with _watch_lock:
        if _watch is None or _watch.pid != os.getpid() or _watch.worker != worker:
            _watch = AttemptWatch(engine, worker, beat_s=beat_s, timeout_s=timeout_s)
        return _watch


#: Commands a thread of this process is handling, from before its claim is sent until its
#: outcome is recorded (or the delivery is sorted out): (worker label, ``command_id``) ->
#: (pid, thread id). A worker process has one label; a test driving the stage in-process for
#: two simulated workers gives two.
_taken: dict[tuple[str | None, str], tuple[int, int]] = {}
_taken_lock = threading.Lock()


@contextmanager
def taken_here(command_id: str, *, worker: str | None) -> Iterator[bool]:
    """Take ``command_id`` for this thread before its claim is sent: True if it is this
    thread's now, False if another thread of this process already has it (a duplicate
    delivery taken by a second thread: it must leave the command to the first, which records
    its outcome or sorts the delivery out). Registered *before* the claim, so there is no
    window in which the claim is committed and the attempt is not yet known to be live here
    (issue 47: a second thread then judged the attempt lost and started another)."""
    me, key = (os.getpid(), threading.get_ident()), (worker, command_id)
    with _taken_lock:
        holder = _taken.get(key)
        mine = holder is None or holder[0] != me[0]  # a forked child inherits stale entries
        if mine:
            _taken[key] = me
    try:
        yield mine
    finally:
        if mine:
            with _taken_lock:
                if _taken.get(key) == me:
                    del _taken[key]


def this_attempt() -> Attempt | None:
    """The attempt this thread is running under the watch, if any."""
    return _current.attempt


def live_here(command_id: str, *, worker: str | None) -> bool:
    """Is another thread of this process handling ``command_id`` right now (claiming it,
    running its attempt or recording it)? The calling thread's own hold does not count: a
    thread that holds the command and finds it ``started`` by this process knows that no
    other thread here is in it, so that attempt is over (a prefork stage retry, a threads
    attempt that ended without its record)."""
    me = (os.getpid(), threading.get_ident())
    with _taken_lock:
        holder = _taken.get((worker, command_id))
    if holder is not None and holder[0] == me[0]:
        return holder != me
    watched = _watch is not None and _watch.pid == me[0] and _watch.live(command_id)
    return watched and holder != me


def cancel_interrupts(attempt: Attempt, run_status: str) -> bool:
    """Does the run's status interrupt the attempt? Only a cancel the tool has not read."""
    return run_status in _CANCELLED and not attempt.saw_cancel


def seen_cancel() -> None:
    """This thread's tool read that its run is being cancelled: it stops on its own, so the
    watch does not interrupt it for the cancel (an interruption now could only turn what it
    knows into an unknown effect). Its deadlines and the fence still apply."""
    attempt = _current.attempt
    if attempt is not None:
        attempt.saw_cancel = True


@contextmanager
def in_tool() -> Iterator[None]:
    """The tool's own code: the only place the watch raises into this thread. On leaving, a
    raise the watch had just sent and that has not fired yet is withdrawn (one that fired
    on the way out makes the call look interrupted: ``unknown`` for a write, never a lie)."""
    attempt = _current.attempt
    if attempt is None:
        yield
        return
    with attempt.lock:
        if attempt.interrupted is not None:
            raise SoftTimeLimitExceeded(
                f"interrupted before the tool started ({attempt.interrupted})"
            )
        attempt.in_tool = True
    try:
        yield
    finally:
        with attempt.lock:
            attempt.in_tool = False
            attempt.left_tool_at = time.monotonic()
            _raise_in(attempt.thread_id, None)
