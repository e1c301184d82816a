"""Building a run's working-memory view from the ledger (the shell side of
warrant.runner.memory_view)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Engine

from warrant.ledger.memory_store import MemoryStore
from warrant.ledger.repo import run_view
from warrant.ledger.stage_loads import autocommit, load_planning
from warrant.runner.memory_view import (
    DEFAULT_MAX_ITEMS,
    ObservationRecord,
    WorkingMemoryView,
    build_view,
)
from warrant.runner.views import RunView
from warrant.tools._registry import Registry

__all__ = [
    "POLICY_OBSERVATION_TTL_STEPS",
    "budget_left",
    "built_event",
    "load_view",
    "view_from_row",
]

#: A refusal stays in the planner's view for this many steps after it happened.
POLICY_OBSERVATION_TTL_STEPS = 3


@functools.cache
def _schema(model: Any) -> dict[str, Any]:
    return model.model_json_schema()


def _offer(tool: Any) -> dict[str, Any]:
    return {
        "name": tool.name,
        "version": tool.version,
        "description": tool.description,
        "inputSchema": _schema(tool.input_model),
    }


def view_from_row(
    row: Any, view: RunView, *, registry: Registry, step: int | None = None
) -> WorkingMemoryView:
    """The view for ``step`` (default: the next step) from a
    :func:`warrant.ledger.stage_loads.load_planning` row: goal, recent observations,
    capabilities and preferences all came in that one read."""
    step = view.step + 1 if step is None else step
    goal_step, goal_content, goal_kind, goal_source, goal_at = row.goal
    observations = [
        ObservationRecord(
            observation_id="user-1",
            kind=goal_kind,
            source=goal_source,
            step=goal_step,
            content=goal_content,
            observed_at=goal_at,
        ),
        *(
            ObservationRecord(
                observation_id=o[0],
                kind=o[1],
                source=o[2],
                step=o[3],
                content=o[4],
                expires_after_step=o[5],
                observed_at=o[6],
            )
            for o in row.recent
        ),
    ]
    held = set(row.capabilities)
    tools = [_offer(t) for t in registry if set(t.capabilities) <= held]
    b = view.budgets
    budgets = {
        "steps_left": b.max_steps - view.step,
        "model_calls_left": None
        if b.max_model_calls is None
        else b.max_model_calls - view.model_calls,
        "tool_calls_left": b.max_tool_calls - view.tool_calls,
        "tokens_left": None if b.max_tokens is None else b.max_tokens - view.tokens_used,
        "cost_left": None if b.max_cost is None else round(b.max_cost - view.cost_used, 6),
        "deadline_at": view.deadline_at,
    }
    return build_view(
        run_id=view.run_id,
        step=step,
        observations=observations,
        tools=tools,
        budgets=budgets,
        preferences=row.preferences,
        plan=row.plan,
        pending_effects=row.pending_effects,
        approved_actions=row.approved_actions,
    )


def load_view(
    engine: Engine, run_id: str, *, registry: Registry, memory: MemoryStore
) -> WorkingMemoryView | None:
    """The view a planner would get for the run's next step (None: no such run)."""
    with autocommit(engine, held=False) as conn:
        row = load_planning(
            conn, run_id, recent=DEFAULT_MAX_ITEMS * 2, memory_keys=memory.allowed_keys
        )
    if row is None:
        return None
    return view_from_row(row, run_view(row), registry=registry)


def budget_left(budgets: dict[str, Any], *, now: float) -> dict[str, Any]:
    """The view's budgets as the trace names them: ``steps``, ``model_calls``, ``tool_calls``,
    ``tokens``, ``cost`` left (``None``: no such budget) and ``time_s``, the seconds to the
    deadline at ``now``."""
    left = {k.removesuffix("_left"): v for k, v in budgets.items() if k != "deadline_at"}
    deadline_at = budgets.get("deadline_at")
    left["time_s"] = None if deadline_at is None else round(max(0.0, deadline_at - now), 3)
    return left


def built_event(memory: Any, *, state_version: int, now: float) -> tuple[str, dict[str, Any]]:
    """The ``observation.built`` event: what the planner was shown (sizes and a hash), the
    run's state version it was built at, the tools offered by name, and the budget left
    (:func:`budget_left`)."""
    details = {
        "items": len(memory.items),
        "tools": len(memory.tools),
        "preferences": len(memory.preferences),
        "view_hash": memory.view_hash(),
        "state_version": state_version,
        "tools_offered": [t["name"] for t in memory.tools],
        "budget_left": budget_left(memory.budgets, now=now),
    }
    if memory.plan is not None:  # which revision of its plan the planner saw
        details["plan_revision"] = memory.plan.get("revision")
    if memory.pending_effects:
        details["pending_effects"] = len(memory.pending_effects)
    if memory.approved_actions:
        details["approved_actions"] = len(memory.approved_actions)
    return ("observation.built", details)
