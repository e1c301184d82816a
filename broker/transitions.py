"""Shared shapes of run transitions: the column changes and events of a stop."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func

from warrant.runner.codes import Phase, RunStatus, StopReason
from warrant.runner.planning import Stop
from warrant.runner.state import RunView

__all__ = ["HARD_LIMIT_GRACE_S", "finish_cancel", "reissue_command", "stop_changes", "stop_events"]


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


#: Extra seconds a tool's hard time limit allows past its soft limit.
HARD_LIMIT_GRACE_S = 5.0


def reissue_command(
    ctx: Any,
    s: Any,
    run: Any,
    cmd: Any,
    *,
    delay_s: float,
    timeout_s: float,
    changes: dict[str, Any],
    events: list[tuple[str, dict[str, Any]]],
    outbox: Any,
) -> int:
    """Schedule another attempt of the *same* command (same idempotency token): it counts as a
    tool call, and its message is published after the commit, ``delay_s`` from now."""
    from warrant.ledger.repo import to_datetime, transition

    cmd.status, cmd.timeout_s = "issued", timeout_s
    cmd.deadline_at = to_datetime(ctx.clock() + delay_s + timeout_s)
    by_tool = dict(run.tool_calls_by_tool or {})
    by_tool[cmd.tool] = by_tool.get(cmd.tool, 0) + 1
    version = transition(
        s,
        run.id,
        run.version,
        changes={**changes, "tool_calls": run.tool_calls + 1, "tool_calls_by_tool": by_tool},
        events=events,
        step=cmd.step,
        proposal_id=cmd.proposal_id,
    )
    run_id, command_id, tool = run.id, cmd.id, cmd.tool
    outbox.add(
        lambda: ctx.publisher.tool(
            run_id=run_id,
            version=version,
            command_id=command_id,
            tool=tool,
            soft_time_limit=timeout_s,
            time_limit=timeout_s + HARD_LIMIT_GRACE_S,
            countdown=delay_s or None,
        )
    )
    return version


def finish_cancel(
    s: Any,
    run: Any,
    *,
    effect: str,
    events: list[tuple[str, dict[str, Any]]],
    step: int,
    observation: Any = None,
) -> int:
    """End a ``cancelling`` run (locked by the caller) as ``cancelled`` once its in-flight
    effect is known: ``effect`` is ``applied`` or ``none``."""
    from warrant.ledger.repo import run_view, transition

    stop = Stop(RunStatus.CANCELLED, StopReason.CANCELLED, {"effect": effect})
    return transition(
        s,
        run.id,
        run.version,
        changes=stop_changes(stop),
        events=[*events, *stop_events(run_view(run), stop, step=step)],
        step=step,
        observation=observation,
    )
