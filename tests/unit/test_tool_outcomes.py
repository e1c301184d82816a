"""The tool stage's pure decisions (``runner.tool_outcomes``): what a call that raised or
returned means, with the stage's facts (interrupted, database lost, cancelling, deadline-bound)
given as flags."""

from __future__ import annotations

import pytest

from tests.gate import Done, FetchIn, noop_tool
from warrant.runner.codes import Outcome, StopReason
from warrant.runner.errors import ToolFailed, ToolRejected, ToolUnknown
from warrant.runner.tool_outcomes import Interruption, after_not_applied, of_error, of_output
from warrant.tools import Accepted, JobHooks, SideEffect

READ = noop_tool("fetch", SideEffect.READ, FetchIn)
WRITE = noop_tool("put", SideEffect.IDEMPOTENT_WRITE, FetchIn)
NONE = Interruption()


@pytest.mark.parametrize("tool", [READ, WRITE])
def test_the_tools_own_errors_decide(tool):
    rejected = of_error(tool, ToolRejected("no", code="NOPE"), said="no", seen=NONE)
    assert (rejected.status, rejected.code, rejected.stop) == (Outcome.REJECTED, "NOPE", None)
    retry = ToolFailed("later", code="BUSY", retryable=True, retry_after_s=2)
    failed = of_error(tool, retry, said="later", seen=NONE)
    assert (failed.status, failed.retryable, failed.retry_after_s) == (Outcome.FAILED, True, 2)
    final = of_error(tool, ToolFailed("gone", code="GONE"), said=None, seen=NONE)
    assert final.stop is StopReason.TOOL_FAILED


def test_an_unknown_effect_is_unknown_for_a_write_and_a_failure_for_a_read():
    lost = ToolUnknown("lost", code="SERVICE_TIMEOUT")
    write = of_error(WRITE, lost, said=None, seen=NONE)
    assert (write.status, write.code, write.trigger) == (
        Outcome.UNKNOWN,
        "SERVICE_TIMEOUT",
        "adapter",
    )
    assert write.message == "SERVICE_TIMEOUT"
    read = of_error(READ, lost, said=None, seen=NONE)
    assert (read.status, read.stop) == (Outcome.FAILED, StopReason.TOOL_FAILED)


def test_an_interruption_is_the_cancels_or_the_timeouts():
    cut = RuntimeError()
    cancelled = of_error(WRITE, cut, said=None, seen=Interruption(interrupted=True, cancelled=True))
    assert (cancelled.code, cancelled.trigger) == ("CANCELLED_DURING_EXECUTION", "cancellation")
    timed_out = of_error(READ, cut, said=None, seen=Interruption(interrupted=True))
    assert (timed_out.code, timed_out.stop) == ("TOOL_TIMEOUT", StopReason.TOOL_FAILED)
    bound = Interruption(interrupted=True, deadline_bound=True)
    assert of_error(READ, cut, said=None, seen=bound).stop is StopReason.DEADLINE_REACHED


def test_a_lost_database_is_retried_for_a_read_and_unknown_for_a_write():
    seen = Interruption(database_lost=True)
    read = of_error(READ, OSError("reset"), said=None, seen=seen)
    assert (read.code, read.retryable) == ("DATABASE_UNAVAILABLE", True)
    write = of_error(WRITE, OSError("reset"), said=None, seen=seen)
    assert (write.status, write.trigger) == (Outcome.UNKNOWN, "database")


def test_anything_else_is_an_internal_error_never_retried():
    read = of_error(READ, KeyError("x"), said=None, seen=NONE)
    assert (read.status, read.code, read.stop, read.retryable) == (
        Outcome.FAILED,
        "TOOL_INTERNAL_ERROR",
        StopReason.TOOL_INTERNAL_ERROR,
        False,
    )
    # a write's adapter may have sent the request before it broke: unknown, reconciled
    write = of_error(WRITE, KeyError("x"), said=None, seen=NONE)
    assert (write.status, write.code, write.stop, write.trigger) == (
        Outcome.UNKNOWN,
        "TOOL_INTERNAL_ERROR",
        StopReason.UNKNOWN_EFFECT,
        "unclassified",
    )


def test_a_not_applied_effect_is_retried_within_every_bound():
    bounds = dict(code="SERVICE_TIMEOUT", attempts=1, max_attempts=3, calls_left=True)
    assert after_not_applied(**bounds, time_left_s=30) is None
    assert after_not_applied(**{**bounds, "attempts": 3}, time_left_s=30) == (
        StopReason.TOOL_FAILED,
        "NOT_APPLIED_MAX_ATTEMPTS",
    )
    assert after_not_applied(**{**bounds, "calls_left": False}, time_left_s=30) == (
        StopReason.TOOL_FAILED,
        "NOT_APPLIED_NO_BUDGET",
    )
    assert after_not_applied(**bounds, time_left_s=0.2)[1] == "NOT_APPLIED_NO_BUDGET"
    broken = {**bounds, "code": "TOOL_INTERNAL_ERROR"}
    assert after_not_applied(**broken, time_left_s=30) == (
        StopReason.TOOL_INTERNAL_ERROR,
        "TOOL_INTERNAL_ERROR",
    )


def test_an_output_is_checked_against_its_schema():
    result, validated = of_output(READ, Done())
    assert (result.status, result.output, validated) == (Outcome.SUCCEEDED, {"ok": True}, Done())
    invalid, nothing = of_output(READ, {"not": "a model"})
    assert (invalid.code, nothing) == ("TOOL_OUTPUT_INVALID", None)


def test_an_accepted_job_needs_job_hooks_and_an_operation_id():
    without = of_output(READ, Accepted("op-1"))[0]
    assert (without.status, without.code) == (Outcome.FAILED, "TOOL_OUTPUT_INVALID")
    hooks = JobHooks(poll=lambda operation_id, ctx: None)
    job = noop_tool("job", SideEffect.IDEMPOTENT_WRITE, FetchIn, job=hooks)
    accepted = of_output(job, Accepted("op-1"))[0]
    assert (accepted.status, accepted.output) == (Outcome.ACCEPTED, {"operation_id": "op-1"})
