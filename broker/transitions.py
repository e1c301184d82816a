"""Re-issuing a command: the same command (same idempotency token) published again; and a
run's planner message sent again after a fact was recorded on it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from warrant.ledger.repo import commit, run_view, to_datetime
from warrant.ledger.row_updates import reissue_command_row
from warrant.runner import run_machine as machine
from warrant.runner.tool_stage import planning

__all__ = ["HARD_LIMIT_GRACE_S", "after_fact", "reissue_command", "tool_message"]

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
    scheduled: dict[str, Any],
    events: list[tuple[str, dict[str, Any]]],
    outbox: Any,
) -> int:
    """Schedule another attempt of the *same* command (same idempotency token): it counts as a
    tool call, and its message is published after the commit, ``delay_s`` from now."""
    deadline_at = to_datetime(ctx.clock() + delay_s + timeout_s)
    reissue_command_row(cmd, timeout_s=timeout_s, deadline_at=deadline_at)
    change = machine.reissue_command(
        run_view(run), tool=cmd.tool, scheduled=scheduled, events=events
    )
    version = commit(s, change, step=cmd.step, proposal_id=cmd.proposal_id)
    outbox.add(
        tool_message(
            ctx, run.id, version, cmd.id, cmd.tool, timeout_s=timeout_s, countdown=delay_s or None
        )
    )
    return version


def tool_message(
    ctx: Any,
    run_id: str,
    version: int,
    command_id: str,
    tool: str,
    *,
    timeout_s: float,
    countdown: float | None = None,
) -> Callable[[], None]:
    """The tool message of a command, to publish after the commit: its soft time limit
    ``timeout_s``, its hard one :data:`HARD_LIMIT_GRACE_S` later; ``countdown``: not before
    that many seconds."""
    return partial(
        ctx.publisher.tool,
        run_id=run_id,
        version=version,
        command_id=command_id,
        tool=tool,
        soft_time_limit=timeout_s,
        time_limit=timeout_s + HARD_LIMIT_GRACE_S,
        countdown=countdown,
    )


def after_fact(ctx: Any, run: Any, version: int, outbox: Any) -> None:
    """A fact was recorded on ``run`` (``RunEvent.RECORD``: its version raised to ``version``,
    its status kept; a parallel step's cut call ending after the merge). If the run waits for
    its planner, the planner message on its way has the version before: it is sent again for
    this one (a planner's wait keeps its wake time: the wait holds for the run's step)."""
    if planning(run):
        outbox.add(partial(ctx.publisher.planner, run.id, version))
