"""SIGUSR1 (a cancel's revoke with terminate) interrupts only the tool's own code
(warrant.broker.tool.interrupts): outside it, it is remembered and interrupts the next tool as it
starts
if its run is being cancelled; a signal between tasks, or a stray one, never fails a task."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from warrant.broker.tool import interrupts


class Raised(Exception):
    pass


@pytest.fixture
def billiard_like() -> Iterator[None]:
    """A SIGUSR1 handler that raises, as billiard's does, then warrant's wrapper around it."""

    def raising(signum: int, frame: object) -> None:
        raise Raised

    before = signal.signal(signal.SIGUSR1, raising)
    interrupts.install()
    interrupts.begin()
    try:
        yield
    finally:
        interrupts.take()
        signal.signal(signal.SIGUSR1, before)


def test_inside_the_tool_the_signal_interrupts(billiard_like):
    with pytest.raises(Raised), interrupts.interruptible():
        os.kill(os.getpid(), signal.SIGUSR1)
    assert interrupts.take() is True
    assert interrupts.take() is False


def test_outside_the_tool_it_is_remembered_and_stops_the_next_tool(billiard_like):
    os.kill(os.getpid(), signal.SIGUSR1)  # e.g. while the stage records an outcome
    ran = []
    with pytest.raises(SoftTimeLimitExceeded), interrupts.interruptible(cancelled=lambda: True):
        ran.append(True)
    assert ran == []  # the tool never started
    with interrupts.interruptible(cancelled=lambda: True):  # once only
        ran.append(True)
    assert ran == [True]
    assert interrupts.take() is True  # the process still leaves after its task


def test_take_forgets_a_pending_interruption(billiard_like):
    os.kill(os.getpid(), signal.SIGUSR1)
    assert interrupts.take() is True
    with interrupts.interruptible():
        pass


def test_a_remembered_signal_of_a_run_not_being_cancelled_is_stray(billiard_like):
    os.kill(os.getpid(), signal.SIGUSR1)  # e.g. a soft time limit delivered late
    ran = []
    with interrupts.interruptible(cancelled=lambda: False):
        ran.append(True)
    assert ran == [True]


def test_a_signal_between_tasks_never_reaches_the_next_task(billiard_like):
    interrupts.take()  # the task is over
    os.kill(os.getpid(), signal.SIGUSR1)  # a late soft time limit, between tasks
    interrupts.begin()  # the next task
    ran = []
    with interrupts.interruptible():
        ran.append(True)
    assert ran == [True]
    assert interrupts.take() is False  # and the process need not leave


def test_begin_forgets_what_came_before(billiard_like):
    os.kill(os.getpid(), signal.SIGUSR1)
    interrupts.begin()
    with interrupts.interruptible():
        pass
    assert interrupts.take() is False
