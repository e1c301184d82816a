"""SIGUSR1 (a cancel's revoke with terminate) interrupts only the tool's own code
(warrant.broker.interrupts): outside it, it is remembered and interrupts the next tool as it
starts."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from warrant.broker import interrupts


class Raised(Exception):
    pass


@pytest.fixture
def billiard_like() -> Iterator[None]:
    """A SIGUSR1 handler that raises, as billiard's does, then warrant's wrapper around it."""

    def raising(signum: int, frame: object) -> None:
        raise Raised

    before = signal.signal(signal.SIGUSR1, raising)
    interrupts.install()
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
    with pytest.raises(SoftTimeLimitExceeded), interrupts.interruptible():
        ran.append(True)
    assert ran == []  # the tool never started
    with interrupts.interruptible():  # once only
        ran.append(True)
    assert ran == [True]
    assert interrupts.take() is True  # the process still leaves after its task


def test_take_forgets_a_pending_interruption(billiard_like):
    os.kill(os.getpid(), signal.SIGUSR1)
    assert interrupts.take() is True
    with interrupts.interruptible():
        pass
