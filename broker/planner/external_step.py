"""A caller's proposal, recorded as its run's next step (planner kind ``external``). Shell only.

The caller takes the planner worker's place for one step: the run must be ``running`` and
waiting for a proposal (phase ``planning``), else ``PROPOSAL_IN_FLIGHT`` (``RUN_RECONCILING``
while an unknown effect is being found out; ``RUN_FINISHED`` after the run's end).
Deadline and budgets are checked first, as before a planner is asked; then the proposal is
recorded by the same code as a planner's (:mod:`warrant.broker.planner._outcomes`): a tool
proposal goes to the policy queue, a final answer or a question ends the step here. Each
proposal counts as one model call, with the tokens and cost the caller reports.

A proposal sent again for a step it already filled (same ``step``, same content) is not a new
step: the call returns that step (:attr:`Submitted.replayed`), so a caller that lost the
answer may retry. Concurrent submissions queue on the run's row lock; the second finds the
first in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from warrant.broker import telemetry
from warrant.broker.planner._outcomes import record_proposal, stopped
from warrant.broker.publish import Outbox
from warrant.ledger.db import session_scope
from warrant.ledger.proposal_facts import step_raw
from warrant.ledger.repo import StaleVersion, commit, run_view
from warrant.ledger.rows import lock_run
from warrant.runner import run_machine as machine
from warrant.runner.canonical import MAX_JSON_DEPTH, canonical_json, json_depth
from warrant.runner.codes import Phase, RunStatus
from warrant.runner.errors import InvalidRequest, RunFinished, RunNotFound, StateConflict
from warrant.runner.spec import Usage
from warrant.runner.step_decisions import check_before_planning

__all__ = ["MAX_PROPOSAL_BYTES", "Submitted", "check_shape", "submit_proposal"]

#: A proposal is what a model would have answered: as large as a planner reply may be.
MAX_PROPOSAL_BYTES = 256 * 1024


@dataclass(frozen=True)
class Submitted:
    run_id: str
    step: int
    result: str
    """The step's result (``forwarded``, ``completed``, ``stopped:<status>:<reason>``)."""
    replayed: bool = False
    """The same proposal had already filled this step: nothing new was recorded."""
    stop: tuple[str, str] | None = None
    """``(status, reason)`` when the run stopped before the proposal was recorded (its
    deadline passed, a budget was spent): ``step`` was never filled."""


def submit_proposal(
    engine: Engine,
    publisher: Any,
    run_id: str,
    raw: Any,
    *,
    by: str,
    step: int | None = None,
    usage: Usage | None = None,
    clock: Callable[[], float] = time.time,
) -> Submitted:
    """Record ``raw`` as the next step of ``run_id`` and publish what it leads to. ``step``,
    when given, is the step the caller means to fill (a retry of it replays)."""
    check_shape(raw)
    outbox = Outbox()
    with session_scope(engine) as s:
        run = lock_run(s, run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id}")
        if (run.spec.get("planner") or {}).get("kind") != "external":
            raise StateConflict(
                f"run {run_id} has its own planner; only a run with planner kind 'external' "
                "takes proposals",
                code="RUN_NOT_EXTERNAL",
            )
        if step is not None and step <= run.step:
            return _replay(s, run_id, step, raw, run.step)
        _check_open(run, step)
        view = run_view(run)
        trace_id = run.trace_id
        stop = check_before_planning(view, clock())
        try:
            if stop is not None:
                commit(s, machine.stop(view, stop, step=view.step), step=view.step)
                return Submitted(
                    run_id,
                    view.step + 1,
                    stopped(stop),
                    stop=(stop.status.value, stop.reason.value),
                )
            result, message = _record(s, publisher, view, raw, by=by, usage=usage or Usage())
        except StaleVersion:
            raise _in_flight(run_id) from None
    if message is not None:
        outbox.add(message)
    with telemetry.run_context(trace_id):
        outbox.flush()
    return Submitted(run_id, view.step + 1, result)


def _record(
    s: Any, publisher: Any, view: Any, raw: Any, *, by: str, usage: Usage
) -> tuple[str, Callable[[], None] | None]:
    step = view.step + 1
    counters = {
        "step": step,
        "model_calls": view.model_calls + 1,
        "tokens_used": view.tokens_used + usage.prompt_tokens + usage.completion_tokens,
        "cost_used": view.cost_used + usage.cost,
    }
    submitted = ("proposal.submitted", {"by": by[:200]})
    return record_proposal(
        publisher, s, view, view.version, step, counters, [submitted], raw, usage, 1
    )


def check_shape(raw: Any) -> None:
    """A caller's proposal is a JSON object, nested at most ``MAX_JSON_DEPTH`` levels, with
    no NaN or Infinity, of at most ``MAX_PROPOSAL_BYTES``; else :class:`InvalidRequest`
    (``PROPOSAL_INVALID``, ``PROPOSAL_TOO_DEEP``, ``PROPOSAL_TOO_LARGE``)."""
    if not isinstance(raw, dict):
        raise InvalidRequest("a proposal is a JSON object", code="PROPOSAL_INVALID")
    if json_depth(raw) > MAX_JSON_DEPTH:  # before anything walks it recursively
        raise InvalidRequest(
            f"a proposal nests arrays and objects at most {MAX_JSON_DEPTH} levels deep",
            code="PROPOSAL_TOO_DEEP",
        )
    try:
        size = len(canonical_json(raw))
    except ValueError as exc:  # NaN or Infinity (a JSON parser may let them through)
        raise InvalidRequest(f"a proposal is plain JSON: {exc}", code="PROPOSAL_INVALID") from None
    if size > MAX_PROPOSAL_BYTES:
        raise InvalidRequest(
            f"a proposal is at most {MAX_PROPOSAL_BYTES} bytes", code="PROPOSAL_TOO_LARGE"
        )


def _check_open(run: Any, step: int | None) -> None:
    status = RunStatus(run.status)
    if status.terminal or status is RunStatus.HANDOFF:
        raise RunFinished(
            f"run {run.id} is {status.value} ({run.stop_reason}): it takes no proposal",
            code="RUN_FINISHED",
        )
    if status is RunStatus.RECONCILING:
        raise StateConflict(
            f"run {run.id}: the effect of step {run.step} is unknown; the reconciler finds out "
            "before the run takes another proposal",
            code="RUN_RECONCILING",
        )
    if status is RunStatus.WAITING_JOB:
        raise StateConflict(
            f"run {run.id}: the job of step {run.step} has not ended; the run takes another "
            "proposal once it has",
            code="RUN_WAITING_JOB",
        )
    if status is not RunStatus.RUNNING or run.phase != Phase.PLANNING.value:
        raise _in_flight(run.id, status=status.value, step=run.step)
    if step is not None and step != run.step + 1:
        raise StateConflict(
            f"run {run.id} waits for step {run.step + 1}, not {step}", code="STEP_MISMATCH"
        )


def _in_flight(run_id: str, *, status: str = "running", step: int | None = None) -> StateConflict:
    at = f" (step {step}, {status})" if step is not None else ""
    return StateConflict(
        f"run {run_id} has a proposal in flight{at}: wait for its decision before the next",
        code="PROPOSAL_IN_FLIGHT",
    )


def _replay(s: Any, run_id: str, step: int, raw: Any, current: int) -> Submitted:
    """A step already filled: the same proposal is a retry; anything else a conflict."""
    earlier = step_raw(s, run_id, step)
    if earlier is not None and canonical_json(earlier) == canonical_json(raw):
        return Submitted(run_id, step, "replayed", replayed=True)
    raise StateConflict(
        f"step {step} of run {run_id} holds another proposal (the run is at step {current})",
        code="STEP_MISMATCH",
    )
