"""Queue names and routing. A tool command goes to its own tool's queue."""

from __future__ import annotations

from typing import Any

from kombu import Queue

from warrant.tools._registry import Registry

__all__ = [
    "PLANNER_QUEUE",
    "POLICY_QUEUE",
    "RECONCILER_QUEUE",
    "TASK_PLANNER",
    "TASK_POLICY",
    "TASK_POLL_JOBS",
    "TASK_RECONCILE",
    "TASK_TOOL",
    "all_queues",
    "route_task",
    "tool_queue",
]

PLANNER_QUEUE = "planner"
POLICY_QUEUE = "policy"
RECONCILER_QUEUE = "reconciler"

TASK_PLANNER = "warrant.planner.step"
TASK_POLICY = "warrant.policy.evaluate"
TASK_TOOL = "warrant.tool.execute"
TASK_RECONCILE = "warrant.reconciler.sweep"
TASK_POLL_JOBS = "warrant.reconciler.poll_jobs"

ROLE_QUEUES = {"planner": PLANNER_QUEUE, "policy": POLICY_QUEUE, "reconciler": RECONCILER_QUEUE}


def tool_queue(tool: str) -> str:
    return f"tool.{tool}"


def all_queues(registry: Registry) -> list[Queue]:
    names = [PLANNER_QUEUE, POLICY_QUEUE, RECONCILER_QUEUE, *registry.queues()]
    return [Queue(name, routing_key=name) for name in names]


def route_task(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> Any:
    """Celery router: stage tasks to their stage queue, tool commands to ``tool.<name>``."""
    if name == TASK_TOOL:
        tool = (kwargs or {}).get("tool")
        if not tool:
            raise ValueError("a tool command must name its tool")
        return {"queue": tool_queue(tool), "routing_key": tool_queue(tool)}
    queue = {
        TASK_PLANNER: PLANNER_QUEUE,
        TASK_POLICY: POLICY_QUEUE,
        TASK_RECONCILE: RECONCILER_QUEUE,
        TASK_POLL_JOBS: RECONCILER_QUEUE,
    }.get(name)
    return {"queue": queue, "routing_key": queue} if queue else None
