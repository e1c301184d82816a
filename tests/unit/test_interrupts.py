"""A cancel's SIGUSR1 and the attempt's own soft deadline interrupt the tool's code, never the
middle of the tool's own ledger read (warrant.broker.tool.interrupts.deferred): a signal landing
inside a database call leaves the driver's connection mid-command and the engine's pool
half-updated, and the outcome's record then waits out the pool timeout."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from warrant.broker.tool import deadline, interrupts


def _billiards(signum, frame):  # what billiard's own SIGUSR1 handler does in a pool child
    raise SoftTimeLimitExceeded("soft time limit exceeded")


@pytest.fixture
def in_task() -> Iterator[None]:
    previous = signal.signal(signal.SIGUSR1, _billiards)
    interrupts.install()
    interrupts.begin()
    try:
        yield
    finally:
        interrupts.take()
        signal.signal(signal.SIGUSR1, previous)


def test_the_read_runs_to_its_end_and_the_signal_is_not_lost(in_task):
    ran: list[str] = []
    with pytest.raises(SoftTimeLimitExceeded), interrupts.interruptible():
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.05)
            ran.append("after the signal")
        ran.append("after the read")  # never: the signal is raised as the read ends
    assert ran == ["after the signal"]


def test_outside_the_read_the_signal_interrupts_at_once(in_task):
    with pytest.raises(SoftTimeLimitExceeded), interrupts.interruptible():
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(5)


def test_the_attempts_own_deadline_waits_for_the_read_too(in_task):
    ran: list[str] = []
    t0 = time.monotonic()
    with (
        pytest.raises(SoftTimeLimitExceeded),
        deadline.enforced(),
        interrupts.interruptible(),
        deadline.own_deadline(soft_at=t0 + 0.05, hard_at=t0 + 30, what="a test"),
    ):
        with interrupts.deferred():
            time.sleep(0.3)  # the alarm fires in here
            ran.append("the whole read")
        ran.append("after the read")
    assert ran == ["the whole read"]
    assert time.monotonic() - t0 >= 0.3


def test_outside_the_tools_window_deferred_does_nothing(in_task):
    with interrupts.deferred():
        os.kill(os.getpid(), signal.SIGUSR1)  # remembered for the next tool, not raised
        time.sleep(0.05)


def test_a_tool_that_read_the_cancel_is_not_interrupted_while_it_stops(in_task):
    # The cancel's ledger flag and its signal race: a tool that already read the flag is
    # stopping on its own ("nothing was written"); the signal landing as it leaves must not
    # replace that known outcome with an unknown one.
    with pytest.raises(LookupError), interrupts.interruptible():
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGUSR1)  # arrives during the read that says "cancelled"
            time.sleep(0.05)
            interrupts.seen_cancel()
        os.kill(os.getpid(), signal.SIGUSR1)  # a second delivery, as the tool raises
        time.sleep(0.05)
        raise LookupError("the tool's own, known outcome")
    assert interrupts.take() is True  # the process still leaves after its task


def test_the_attempts_deadline_still_interrupts_a_tool_that_read_the_cancel(in_task):
    t0 = time.monotonic()
    with (
        pytest.raises(SoftTimeLimitExceeded),
        deadline.enforced(),
        interrupts.interruptible(),
        deadline.own_deadline(soft_at=t0 + 0.05, hard_at=t0 + 30, what="a test"),
    ):
        with interrupts.deferred():
            interrupts.seen_cancel()
            time.sleep(0.3)  # the soft deadline fires in here
        time.sleep(5)


def test_the_next_task_is_interruptible_again(in_task):
    with interrupts.interruptible():
        interrupts.seen_cancel()
    interrupts.take()
    interrupts.begin()
    with pytest.raises(SoftTimeLimitExceeded), interrupts.interruptible():
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(5)
