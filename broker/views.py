"""Building a run's working-memory view from the ledger (the shell side of runner.memory)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ledger.memory import MemoryStore
from ledger.models import Observation, Run
from ledger.repo import grants_of, run_view
from runner.memory import DEFAULT_MAX_ITEMS, ObservationRecord, WorkingMemoryView, build_view
from tools.registry import Registry

__all__ = ["POLICY_OBSERVATION_TTL_STEPS", "load_view"]

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


def _record(o: Observation) -> ObservationRecord:
    return ObservationRecord(
        observation_id=o.observation_id,
        kind=o.kind,
        source=o.source,
        step=o.step,
        content=o.content,
        expires_after_step=o.expires_after_step,
    )


def load_view(
    s: Session, run: Run, *, registry: Registry, memory: MemoryStore, step: int | None = None
) -> WorkingMemoryView:
    """The view for ``step`` (default: the next step), reading only what it shows."""
    step = run.step + 1 if step is None else step
    goal = s.scalars(
        select(Observation).where(
            Observation.run_id == run.id, Observation.observation_id == "user-1"
        )
    ).one()
    recent = list(
        s.scalars(
            select(Observation)
            .where(Observation.run_id == run.id, Observation.observation_id != "user-1")
            .order_by(Observation.id.desc())
            .limit(DEFAULT_MAX_ITEMS * 2)
        )
    )[::-1]
    view = run_view(run)
    held = {g.capability for g in grants_of(s, run.id)}
    tools = [_offer(t) for t in registry if set(t.capabilities) <= held]
    b = view.budgets
    budgets = {
        "steps_left": b.max_steps - view.step,
        "model_calls_left": b.max_model_calls - view.model_calls,
        "tool_calls_left": b.max_tool_calls - view.tool_calls,
        "tokens_left": None if b.max_tokens is None else b.max_tokens - view.tokens_used,
        "cost_left": None if b.max_cost is None else round(b.max_cost - view.cost_used, 6),
        "deadline_at": view.deadline_at,
    }
    return build_view(
        run_id=run.id,
        step=step,
        observations=[_record(goal), *(_record(o) for o in recent)],
        tools=tools,
        budgets=budgets,
        preferences=memory.preferences(run.subject, session=s),
    )
