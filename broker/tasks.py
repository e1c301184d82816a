"""Celery tasks: thin shells over the stages (load, call pure functions, commit, publish)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from celery.exceptions import Ignore
from sqlalchemy.exc import InterfaceError, OperationalError

from warrant.broker.app import app
from warrant.broker.context import StageContext, worker_context
from warrant.broker.handoff_entry import enter_handoff
from warrant.broker.planner import stage as stage_planner
from warrant.broker.policy import stage as stage_policy
from warrant.broker.process_identity import this_process
from warrant.broker.publish import log_deferred
from warrant.broker.queues import (
    TASK_PLANNER,
    TASK_POLICY,
    TASK_POLL_JOBS,
    TASK_RECONCILE,
    TASK_TOOL,
)
from warrant.broker.reconciler import stage as stage_reconciler
from warrant.broker.tool import deadline, interrupts
from warrant.broker.tool import stage as stage_tool
from warrant.broker.tool.lease import worker_label
from warrant.ledger import rows
from warrant.ledger.db import session_scope
from warrant.ledger.repo import StaleVersion, commit, run_view
from warrant.runner import run_machine as machine
from warrant.runner.codes import RunStatus, StopReason
from warrant.runner.errors import BrokerUnavailable
from warrant.runner.run_machine import Stop

__all__ = [
    "planner_step",
    "policy_evaluate",
    "reconciler_poll_jobs",
    "reconciler_sweep",
    "tool_execute",
]

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
                run = rows.lock_run(s, run_id)
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
                commit(s, machine.stop(view, stop, step=view.step), step=view.step)
        except StaleVersion:
            return "ignored"
        return "internal_error"


@app.task(name=TASK_PLANNER, bind=True, **_RETRY)
def planner_step(self: Any, run_id: str, version: int) -> str:
    started = time.monotonic()
    result = _guarded(
        "planner", run_id, version, lambda c: stage_planner.planner_step(c, run_id, version)
    )
    return reported(self, result, started=started)


@app.task(name=TASK_POLICY, bind=True, **_RETRY)
def policy_evaluate(self: Any, run_id: str, version: int) -> str:
    started = time.monotonic()
    result = _guarded(
        "policy", run_id, version, lambda c: stage_policy.policy_evaluate(c, run_id, version)
    )
    return reported(self, result, started=started)


@app.task(name=TASK_TOOL, bind=True, **_RETRY)
def tool_execute(self: Any, run_id: str, version: int, command_id: str, tool: str) -> str:
    started = time.monotonic()
    worker = worker_label(self.request.hostname, this_process())
    # prefork: signals (a cancel's revoke-terminate); a threads pool's attempts are
    # interrupted by the process's attempt watch instead (broker.tool._attempt_watch)
    signalled = threading.current_thread() is threading.main_thread()
    if signalled:
        interrupts.install()
        interrupts.begin()
    try:
        with deadline.enforced():  # the attempt ends itself at its limits (broker.tool.deadline)
            result = _guarded(
                "tool",
                run_id,
                version,
                lambda c: stage_tool.tool_execute(
                    c, run_id, version, command_id, worker=worker, tool=tool
                ),
            )
        return reported(self, result, started=started)  # a refusal: Flower shows TOOL_REJECTED
    finally:
        # SIGUSR1 from a cancel's revoke-with-terminate (not from a plain soft time limit,
        # which billiard does not remember): the outcome is committed; leave so the pool
        # replaces this process (see warrant.broker.tool.interrupts). billiard reports the
        # result first.
        if (
            signalled
            and interrupts.take()
            and worker_context().tool_deps.run_status(run_id)
            in (
                RunStatus.CANCELLING.value,
                RunStatus.CANCELLED.value,
            )
        ):
            raise SystemExit(0)


@app.task(name=TASK_RECONCILE, **_RETRY)
def reconciler_sweep() -> dict[str, Any]:
    """One sweep (scheduled by beat; safe to run concurrently: an advisory lock serializes)."""
    return stage_reconciler.sweep(worker_context()).to_dict()


@app.task(name=TASK_POLL_JOBS, **_RETRY)
def reconciler_poll_jobs(run_id: str) -> dict[str, Any]:
    """The due job polls, sent ``JobHooks.interval_s`` after ``run_id``'s job was accepted
    and after each poll that found it still running."""
    return stage_reconciler.poll_jobs(worker_context(), run_id).to_dict()


# -- What a warrant task shows in Flower: a task whose stage recorded a refusal or a failure
# ends in a state of its own, not ``SUCCESS``.
#
# Flower keeps Celery's event state (:class:`celery.events.state.State`): a task's state follows
# its events, an unknown ``task-<name>`` event sets the custom state ``<NAME>``, and
# ``task-succeeded`` outranks every state but ``RETRY``. So such a task sends one custom event,
# ``task-<state>`` with its result and runtime, and ends with :class:`celery.exceptions.Ignore`:
# Celery acknowledges the message and sends no ``task-succeeded`` — no retry, no failure, no
# ``task_failure`` signal (there is no result backend; the ledger is the record). Should the
# event not go out, the task returns as before and shows ``SUCCESS``.

#: A tool refused the call (``ToolRejected``); the run usually goes on.
TOOL_REJECTED = "TOOL_REJECTED"
#: A tool attempt failed (``ToolFailed``, a timeout, an internal error), retried or not.
TOOL_FAILED = "TOOL_FAILED"
#: A write whose effect is unknown: the run is reconciled.
EFFECT_UNKNOWN = "EFFECT_UNKNOWN"
#: The gate refused the planner's proposal; the run re-plans.
PROPOSAL_REJECTED = "PROPOSAL_REJECTED"
#: The task ended its run as ``failed`` (a budget, a model failure, a bug in a stage).
RUN_FAILED = "RUN_FAILED"

_TOOL_STATES = {
    "rejected": TOOL_REJECTED,
    "failed": TOOL_FAILED,
    "retry_scheduled": TOOL_FAILED,
    "unknown": EFFECT_UNKNOWN,
}


def flower_state(task_name: str, result: str) -> str | None:
    """The custom state of a task that returned ``result`` (``None``: it shows ``SUCCESS``).
    Results are a stage's: ``rejected:<code>``, ``stopped:<status>:<reason>``, ..."""
    head, _, rest = result.partition(":")
    if head == "internal_error" or (head == "stopped" and rest.startswith("failed:")):
        return RUN_FAILED
    if task_name == TASK_TOOL:
        return _TOOL_STATES.get(head)
    if task_name == TASK_POLICY and head == "rejected":
        return PROPOSAL_REJECTED
    return None  # the planner's other results: forwarded, completed, stopped as needs_input...


def reported(task: Any, result: str, *, started: float) -> str:
    """Return ``result``, or show the task in its custom state and end it with ``Ignore``."""
    state = flower_state(task.name, result)
    if state is None or task.request.called_directly:
        return result
    runtime = time.monotonic() - started
    try:
        task.send_event(f"task-{state.lower()}", retry=False, result=repr(result), runtime=runtime)
    except Exception as exc:  # no event: the task shows SUCCESS rather than STARTED forever
        log.warning("task %s[%s]: no %s event (%s)", task.name, task.request.id, state, exc)
        return result
    log.info("task %s[%s] %s in %.3fs: %s", task.name, task.request.id, state, runtime, result)
    raise Ignore(state)
