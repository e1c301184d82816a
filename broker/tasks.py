"""Celery tasks: thin shells over the stages (load, call pure functions, commit, publish)."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, OperationalError

from broker.app import app
from broker.context import worker_context
from broker.queues import TASK_PLANNER, TASK_POLICY, TASK_TOOL
from broker.stage_planner import planner_step
from broker.stage_policy import policy_evaluate
from broker.stage_tool import tool_execute

__all__ = ["evaluate_policy", "execute_tool", "step_planner"]

# A lost database connection is retried with backoff; the version check makes it safe.
_RETRY = {
    "autoretry_for": (OperationalError, DBAPIError),
    "retry_backoff": True,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 8,
}


@app.task(name=TASK_PLANNER, **_RETRY)
def step_planner(run_id: str, version: int) -> str:
    return planner_step(worker_context(), run_id, version)


@app.task(name=TASK_POLICY, **_RETRY)
def evaluate_policy(run_id: str, version: int) -> str:
    return policy_evaluate(worker_context(), run_id, version)


@app.task(name=TASK_TOOL, **_RETRY)
def execute_tool(run_id: str, version: int, command_id: str, tool: str) -> str:
    return tool_execute(worker_context(), run_id, version, command_id)
