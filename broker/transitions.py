"""Shared shapes of run transitions: the column changes and events of a stop."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func

from runner.codes import Phase
from runner.planning import Stop
from runner.state import RunView

__all__ = ["stop_changes", "stop_events"]


def stop_changes(stop: Stop) -> dict[str, Any]:
    changes: dict[str, Any] = {
        "status": stop.status.value,
        "phase": Phase.IDLE.value,
        "stop_reason": stop.reason.value,
        "stop_detail": stop.detail or None,
        "pending_proposal_id": None,
        "active_command_id": None,
    }
    if stop.status.terminal:
        changes["finished_at"] = func.now()
    if stop.answer is not None:
        changes["answer"] = stop.answer
    return changes


def stop_events(
    view: RunView, stop: Stop, *, step: int, counters: dict[str, Any] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """``state.transitioned`` and ``run.stopped`` with a budget snapshot after the step."""
    snapshot = {**view.budget_snapshot(), "step": step, **(counters or {})}
    return [
        ("state.transitioned", {"from": view.status.value, "to": stop.status.value}),
        (
            "run.stopped",
            {
                "status": stop.status.value,
                "reason": stop.reason.value,
                "budget": snapshot,
                **({"detail": stop.detail} if stop.detail else {}),
            },
        ),
    ]
