"""An attempt ends itself at its limits (warrant.broker.tool.deadline), with no help from the pool's
parent: the soft limit raises inside the tool, the hard limit ends the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from warrant.broker.tool import deadline


def test_the_soft_limit_raises_inside_the_tool():
    t0 = time.monotonic()
    with (
        pytest.raises(SoftTimeLimitExceeded),
        deadline.enforced(),
        deadline.own_deadline(soft_at=t0 + 0.2, hard_at=t0 + 30, what="a test"),
    ):
        time.sleep(10)
    assert 0.15 < time.monotonic() - t0 < 2


def test_outside_a_tool_task_nothing_is_enforced():
    t0 = time.monotonic()
    with deadline.own_deadline(soft_at=t0, hard_at=t0, what="a test"):
        time.sleep(0.1)


def test_after_the_call_no_alarm_is_left_behind():
    t0 = time.monotonic()
    with deadline.enforced(), deadline.own_deadline(soft_at=t0 + 0.2, hard_at=t0 + 0.4, what="x"):
        pass
    time.sleep(0.6)  # neither the alarm nor the watchdog fires after the call


def test_a_tool_that_swallows_the_soft_limit_is_ended_at_the_hard_limit():
    script = textwrap.dedent(
        """
        import time
        from warrant.broker.tool import deadline
        t0 = time.monotonic()
        with deadline.enforced(), deadline.own_deadline(
            soft_at=t0 + 0.2, hard_at=t0 + 1.0, what="a stubborn tool"
        ):
            while True:
                try:
                    time.sleep(10)
                except BaseException:
                    pass  # a tool that ignores its soft limit
        """
    )
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], timeout=30, capture_output=True)
    took = time.monotonic() - t0
    assert done.returncode == deadline.HARD_LIMIT_EXIT, done.stderr
    assert took < 10


def test_tools_see_a_fencing_token():
    from warrant.tools._contract import ToolContext

    ctx = ToolContext(
        run_id="r",
        command_id="c",
        subject="s",
        idempotency_token="t",
        attempt=2,
        deadline_at=0.0,
        deps=None,
    )
    assert ctx.fencing_token == ("c", 2)
