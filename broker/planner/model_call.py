"""A planner step's model call and its run's cancellation: the cancel signal the planner is
given while it thinks (``broker.planner.run_watch``), and the charge for a call whose answer came
too late to be recorded (the run was cancelled or moved on meanwhile)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from warrant.broker.context import StageContext
from warrant.broker.planner.run_watch import the_run_watch
from warrant.ledger.db import session_scope
from warrant.ledger.repo import charge_usage
from warrant.runner.cancellation import CancelSignal
from warrant.runner.spec import FixturePlannerSpec, RunSpec, Usage
from warrant.runner.views import RunView

__all__ = ["ABANDONED", "cancel_signal", "charge_late"]

#: The code of a model call given up because its run was cancelled (its usage estimated).
ABANDONED = "MODEL_CALL_ABANDONED"


@contextmanager
def cancel_signal(ctx: StageContext, spec: RunSpec, run_id: str) -> Iterator[CancelSignal | None]:
    """The run's cancel signal while a model is asked; none for a fixture planner (it answers
    at once)."""
    if isinstance(spec.planner, FixturePlannerSpec):
        yield None
        return
    watch = the_run_watch(ctx.engine, every_s=ctx.settings.lease_heartbeat_s)
    with watch.watching(run_id) as signal:
        yield signal


def charge_late(
    ctx: StageContext,
    view: RunView,
    usage: Usage,
    calls: int,
    failed: dict[str, Any] | None,
    *,
    step: int,
) -> None:
    """The step's answer lost its compare-and-set (a cancel, most often, while the model was
    thinking): its model calls and their usage still count against the run."""
    code = (failed or {}).get("code")
    with session_scope(ctx.engine) as s:
        charge_usage(
            s,
            view.run_id,
            model_calls=calls,
            tokens=usage.prompt_tokens + usage.completion_tokens,
            cost=usage.cost,
            step=step,
            details={"version": view.version, "code": code, "estimated": usage.estimated},
        )
