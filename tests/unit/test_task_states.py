"""Which warrant task results Flower shows in a state of their own (pure)."""

from __future__ import annotations

import pytest

from warrant.broker import tasks as ts
from warrant.broker.queues import TASK_PLANNER, TASK_POLICY, TASK_TOOL


@pytest.mark.parametrize(
    ("task", "result", "state"),
    [
        (TASK_TOOL, "succeeded", None),
        (TASK_TOOL, "rejected:REQUEST_REFUSED", ts.TOOL_REJECTED),
        (TASK_TOOL, "failed:RESOURCE_NOT_FOUND", ts.TOOL_FAILED),
        (TASK_TOOL, "retry_scheduled:UPSTREAM_5XX", ts.TOOL_FAILED),
        (TASK_TOOL, "unknown:TOOL_TIMEOUT", ts.EFFECT_UNKNOWN),
        (TASK_TOOL, "late_handoff", None),
        (TASK_TOOL, "internal_error", ts.RUN_FAILED),
        (TASK_POLICY, "accepted", None),
        (TASK_POLICY, "rejected:UNKNOWN_TOOL_OR_VERSION", ts.PROPOSAL_REJECTED),
        (TASK_POLICY, "stopped:failed:MAX_TOOL_CALLS_REACHED", ts.RUN_FAILED),
        (TASK_PLANNER, "forwarded", None),
        (TASK_PLANNER, "completed", None),
        (TASK_PLANNER, "stopped:needs_input:CLARIFICATION_REQUIRED", None),
        (TASK_PLANNER, "stopped:failed:MAX_STEPS_REACHED", ts.RUN_FAILED),
    ],
)
def test_flower_state(task: str, result: str, state: str | None) -> None:
    assert ts.flower_state(task, result) == state
