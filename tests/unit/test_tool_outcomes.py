"""The tool stage's pure decisions (``runner.tool_outcomes``): what a call that raised or
returned means, with the stage's facts (interrupted, database lost, cancelling, deadline-bound)
given as flags."""

from __future__ import annotations

import pytest

from tests.gate import Done, FetchIn, noop_tool, run
from warrant.runner.codes import Outcome, Phase, RunStatus, StopReason
from warrant.runner.errors import ToolFailed, ToolRejected, ToolUnknown
from warrant.runner.run_machine import conclude_tool
from warrant.runner.tool_outcomes import Interruption, after_not_applied, of_error, of_output
from warrant.tools import Accepted, JobHooks, OnError, SideEffect

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


def test_a_declared_ask_user_refusal_asks_the_user_and_others_are_replanned():
    # Tool.errors (issue 54): a refusal whose code the tool declares ask_user stops the run for
    # its user's answer; a declared replan one, and an undeclared one, go back to the planner.
    errors = {"QUOTA_EXCEEDED": OnError.ASK_USER, "CUSTOMER_NOT_FOUND": "replan"}
    tool = noop_tool("book", SideEffect.IDEMPOTENT_WRITE, FetchIn, errors=errors)
    asked = of_error(
        tool, ToolRejected("3 of 3 used", code="QUOTA_EXCEEDED"), said="3 of 3 used", seen=NONE
    )
    assert (asked.status, asked.code, asked.stop) == (
        Outcome.REJECTED,
        "QUOTA_EXCEEDED",
        StopReason.CLARIFICATION_REQUIRED,
    )
    for code in ("CUSTOMER_NOT_FOUND", "SOMETHING_ELSE"):
        plain = of_error(tool, ToolRejected("no", code=code), said="no", seen=NONE)
        assert (plain.status, plain.code, plain.stop) == (Outcome.REJECTED, code, None)
    assert tool.describe()["errors"] == {
        "QUOTA_EXCEEDED": "ask_user",
        "CUSTOMER_NOT_FOUND": "replan",
    }


def test_a_declared_error_with_an_unknown_handling_is_refused_at_definition():
    with pytest.raises(ValueError):
        noop_tool("book", SideEffect.READ, FetchIn, errors={"QUOTA_EXCEEDED": "retry"})


def test_the_run_asks_its_user_naming_the_tool_the_code_and_its_message():
    change = conclude_tool(
        run(phase=Phase.TOOL),
        tool="book",
        succeeded=False,
        write=True,
        code="QUOTA_EXCEEDED",
        message="3 of 3 seats used",
        stop_reason=StopReason.CLARIFICATION_REQUIRED,
        step=1,
        events=[("tool.completed", {"tool": "book", "status": "rejected"})],
    )
    assert change.target is RunStatus.NEEDS_INPUT
    assert change.changes["stop_reason"] == "CLARIFICATION_REQUIRED"
    question = change.changes["answer"]
    assert "book" in question and "QUOTA_EXCEEDED" in question and "3 of 3 seats used" in question


def test_an_output_over_its_bound_is_cut_with_a_marker_and_a_small_one_kept_whole():
    from warrant.runner.canonical import canonical_json, content_hash
    from warrant.runner.tool_outcomes import MIN_OUTPUT_BYTES, TRUNCATED, bounded_output

    small = {"id": "r-1", "rows": ["a", "b"]}
    assert bounded_output(small, 4_096) == (small, None)
    assert bounded_output(None, 4_096) == (None, None)
    big = {
        "id": "r-1",
        "next": "p2",
        "rows": [f"{n:05d}" * 10 for n in range(2_000)],
        "t": "é" * 9_000,
    }
    kept, marker = bounded_output(big, 4_096)
    assert kept is not None and marker is not None and kept[TRUNCATED] == marker
    assert len(canonical_json(kept)) <= 4_096
    assert (kept["id"], kept["next"]) == ("r-1", "p2")  # small fields whole
    assert marker["truncated"] is True and marker["cut"] == ["rows", "t"]
    assert marker["original_bytes"] == len(canonical_json(big))
    assert marker["sha256"] == content_hash(big)  # the whole output's hash
    assert kept["rows"] == big["rows"][: len(kept["rows"])]  # a list keeps its first elements
    assert bounded_output(big, 10)[0] == bounded_output(big, MIN_OUTPUT_BYTES)[0]  # a floor
