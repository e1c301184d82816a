"""Celery tasks: thin shells over the stages (load, call pure functions, commit, publish)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError

from warrant.broker import interrupts
from warrant.broker.app import app
from warrant.broker.context import StageContext, worker_context
from warrant.broker.handoffs import enter_handoff
from warrant.broker.lease import worker_label
from warrant.broker.publish import log_deferred
from warrant.broker.queues import TASK_PLANNER, TASK_POLICY, TASK_RECONCILE, TASK_TOOL
from warrant.broker.stage_planner import planner_step
from warrant.broker.stage_policy import policy_evaluate
from warrant.broker.stage_reconciler import sweep
from warrant.broker.stage_tool import tool_execute
from warrant.broker.transitions import stop_changes, stop_events
from warrant.ledger.db import session_scope
from warrant.ledger.models import Run
from warrant.ledger.repo import StaleVersion, run_view, transition
from warrant.runner.codes import RunStatus, StopReason
from warrant.runner.errors import BrokerUnavailable
from warrant.runner.planning import Stop

__all__ = ["evaluate_policy", "execute_tool", "reconcile", "step_planner"]

log = logging.getLogger("warrant.tasks")

#: Connection trouble is retried with backoff (the version check makes a retry safe).
TRANSIENT = (OperationalError, InterfaceError)
_RETRY = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": True,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 8,
}


def _guarded(stage: str, run_id: str, version: int, call: Callable[[StageContext], str]) -> str:
    """Run a stage; a bug (anything not transient) stops the run instead of looping, or hands
    it to a person when the run spec asks for that on unclassifiable policy situations."""
    ctx = worker_context()
    try:
        return call(ctx)
    except TRANSIENT:
        raise
    except BrokerUnavailable as exc:
        # Stages publish only after their commit: the stalled-run sweep re-publishes.
        log_deferred(exc)
        return "publish_deferred"
    except Exception as exc:
        log.exception("stage %s failed for run %s", stage, run_id)
        error = {"stage": stage, "error": type(exc).__name__}
        stop = Stop(RunStatus.FAILED, StopReason.INTERNAL_ERROR, error)
        try:
            with session_scope(ctx.engine) as s:
                run = s.get(Run, run_id, with_for_update=True)
                if run is None or run.version != version:
                    return "ignored"
                if stage == "policy" and run.spec.get("handoff", {}).get(
                    "on_unclassified_policy", False
                ):
                    enter_handoff(
                        s,
                        run,
                        reason=StopReason.INTERNAL_ERROR.value,
                        registry=ctx.registry,
                        events=[("stage.failed", error)],
                    )
                    return "handoff"
                view = run_view(run)
                transition(
                    s,
                    run_id,
                    version,
                    changes=stop_changes(stop),
                    events=stop_events(view, stop, step=view.step),
                    step=view.step,
                )
        except StaleVersion:
            return "ignored"
        return "internal_error"


@app.task(name=TASK_PLANNER, **_RETRY)
def step_planner(run_id: str, version: int) -> str:
    return _guarded("planner", run_id, version, lambda c: planner_step(c, run_id, version))


@app.task(name=TASK_POLICY, **_RETRY)
def evaluate_policy(run_id: str, version: int) -> str:
    return _guarded("policy", run_id, version, lambda c: policy_evaluate(c, run_id, version))


@app.task(name=TASK_TOOL, bind=True, **_RETRY)
def execute_tool(self: Any, run_id: str, version: int, command_id: str, tool: str) -> str:
    worker = worker_label(self.request.hostname, os.getpid())
    interrupts.install()
    try:
        return _guarded(
            "tool",
            run_id,
            version,
            lambda c: tool_execute(c, run_id, version, command_id, worker=worker, tool=tool),
        )
    finally:
        # SIGUSR1 from a cancel's revoke-with-terminate (not from a plain soft time limit,
        # which billiard does not remember): the outcome is committed; leave so the pool
        # replaces this process (see warrant.broker.interrupts). billiard reports the result first.
        if interrupts.take() and worker_context().tool_deps.run_status(run_id) in (
            RunStatus.CANCELLING.value,
            RunStatus.CANCELLED.value,
        ):
            raise SystemExit(0)


@app.task(name=TASK_RECONCILE, **_RETRY)
def reconcile() -> dict[str, Any]:
    """One sweep (scheduled by beat; safe to run concurrently: an advisory lock serializes)."""
    return sweep(worker_context()).to_dict()
