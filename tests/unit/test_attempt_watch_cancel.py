"""On a threads pool the attempt watch raises a cancel into the tool's thread — unless the tool
already read the cancel itself (``ToolContext.is_cancelled``) and is stopping on its own: the
raise could then only turn its known outcome into an unknown effect."""

from __future__ import annotations

import threading
import time

from warrant.broker.tool import _attempt_watch as attempt_watch
from warrant.broker.tool._attempt_watch import Attempt, cancel_interrupts


def _attempt() -> Attempt:
    now = time.monotonic()
    return Attempt("c1", "r1", "attempt of c1", soft_at=now + 60, hard_at=now + 90, renewed=now)


def test_a_cancel_the_tool_has_not_read_interrupts_it():
    attempt = _attempt()
    assert cancel_interrupts(attempt, "cancelling")
    assert cancel_interrupts(attempt, "cancelled")
    assert not cancel_interrupts(attempt, "running")


def test_a_tool_that_read_the_cancel_is_left_to_stop(monkeypatch):
    attempt = _attempt()
    monkeypatch.setattr(attempt_watch._current, "attempt", attempt)
    attempt_watch.seen_cancel()
    assert attempt.saw_cancel
    assert not cancel_interrupts(attempt, "cancelling")


def test_seen_cancel_marks_only_this_threads_attempt(monkeypatch):
    mine, other = _attempt(), _attempt()
    monkeypatch.setattr(attempt_watch._current, "attempt", mine)

    def in_other_thread() -> None:
        attempt_watch._current.attempt = other
        attempt_watch.seen_cancel()

    t = threading.Thread(target=in_other_thread)
    t.start()
    t.join()
    assert other.saw_cancel and not mine.saw_cancel
