"""What a warrant task shows in Flower: a task whose stage recorded a refusal or a failure
ends in a state of its own, not ``SUCCESS``.

Flower keeps Celery's event state (:class:`celery.events.state.State`): a task's state follows
its events, an unknown ``task-<name>`` event sets the custom state ``<NAME>``, and
``task-succeeded`` outranks every state but ``RETRY``. So such a task sends one custom event,
``task-<state>`` with its result and runtime, and ends with :class:`celery.exceptions.Ignore`:
Celery acknowledges the message and sends no ``task-succeeded`` — no retry, no failure, no
``task_failure`` signal (there is no result backend; the ledger is the record). Should the
event not go out, the task returns as before and shows ``SUCCESS``."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery.exceptions import Ignore

from warrant.broker.queues import TASK_POLICY, TASK_TOOL

__all__ = [
    "EFFECT_UNKNOWN",
    "PROPOSAL_REJECTED",
    "RUN_FAILED",
    "TOOL_FAILED",
    "TOOL_REJECTED",
    "flower_state",
    "reported",
]

log = logging.getLogger("warrant.tasks")

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
