"""A caller's proposal, recorded as its run's next step (planner kind ``external``): the locked
write. The checks are :mod:`warrant.runner.external`'s; the caller publishes what it leads to.

The caller takes the planner worker's place for one step: the run must be ``running`` and
waiting for a proposal (phase ``planning``), else ``PROPOSAL_IN_FLIGHT`` (``RUN_RECONCILING``
while an unknown effect is being found out; ``RUN_FINISHED`` after the run's end).
Deadline and budgets are checked first, as before a planner is asked; then the proposal is
recorded by the same code as a planner's (:mod:`warrant.ledger.planner_outcomes`): a tool
proposal goes to the policy queue, a final answer or a question ends the step here. Each
proposal counts as one model call, with the tokens and cost the caller reports.

A proposal sent again for a step it already filled (same ``step``, same content) is not a new
step: the call returns that step (:attr:`~warrant.runner.external.Submitted.replayed`), so a
caller that lost the answer may retry. So is a proposal under a caller's key already recorded
(``caller_keys``: a tool-call id, an MCP request, an ``Idempotency-Key``), whatever the run's
state since: the key names that step (or that call of a parallel step), never a second one; the
same key with another call is ``IDEMPOTENCY_KEY_REUSED``. Concurrent submissions queue on the
run's row lock; the second finds the first in flight, or its key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from warrant.ledger.db import session_scope
from warrant.ledger.models import CallerKey
from warrant.ledger.planner_outcomes import StepWrite, record_proposal, stopped
from warrant.ledger.proposal_facts import step_raw
from warrant.ledger.repo import StaleVersion, commit, run_view
from warrant.ledger.rows import lock_run
from warrant.ledger.stage_loads import artifacts_made_by
from warrant.runner import run_machine as machine
from warrant.runner.canonical import canonical_json
from warrant.runner.errors import RunNotFound, StateConflict
from warrant.runner.external import (
    CallerKey as Key,
)
from warrant.runner.external import (
    Submitted,
    caller_keys,
    check_open,
    in_flight,
    replayed_key,
    without_call_ids,
)
from warrant.runner.handoff import artifacts_made, with_artifacts
from warrant.runner.spec import Usage
from warrant.runner.step_decisions import check_before_planning

__all__ = ["Recorded", "record_external_proposal"]


@dataclass(frozen=True)
class Recorded:
    """What the write did, and what to publish once it committed."""

    submitted: Submitted
    message: Callable[[], None] | None = None
    """The message the step leads to (the policy queue's), for after the commit."""
    trace_id: str | None = None
    """The run's trace (the publish continues it)."""


def record_external_proposal(
    engine: Engine,
    publisher: Any,
    run_id: str,
    raw: Any,
    *,
    by: str,
    step: int | None,
    usage: Usage | None,
    clock: Callable[[], float],
    call_id: str | None = None,
    unverified: frozenset[tuple[str, str]] = frozenset(),
) -> Recorded:
    """Record ``raw`` (its shape already checked: :func:`~warrant.runner.external.
    check_shape`) as the next step of ``run_id``, under the run's row lock. ``step``, when
    given, is the step the caller means to fill (a retry of it replays); ``call_id``, the
    caller's key of it (a retry under it replays, see the module). ``clock``: what the
    deadline is judged on (read under the lock). ``unverified``: the registry's unverified
    writes (a success condition only they satisfy is flagged, as the planner stage does)."""
    keys = caller_keys(raw, call_id)
    raw = without_call_ids(raw)
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
        if keys and (known := _known_keys(s, run_id, keys)):
            at, branch = replayed_key(known, keys)
            return Recorded(Submitted(run_id, at, "replayed", replayed=True, branch=branch))
        if step is not None and step <= run.step:
            return Recorded(_replay(s, run_id, step, raw, run.step))
        check_open(run, step)
        view = run_view(run)
        trace_id = run.trace_id
        stop = check_before_planning(view, clock())
        try:
            if stop is not None:
                stop = with_artifacts(stop, artifacts_made(artifacts_made_by(s, run_id)))
                commit(s, machine.stop(view, stop, step=view.step), step=view.step)
                stop_at = (stop.status.value, stop.reason.value)
                return Recorded(Submitted(run_id, view.step + 1, stopped(stop), stop=stop_at))
            result, message = _record(
                s, publisher, view, raw, by=by, usage=usage or Usage(), unverified=unverified
            )
            _remember_keys(s, run_id, view.step + 1, keys)
        except StaleVersion:
            raise in_flight(run_id) from None
    return Recorded(Submitted(run_id, view.step + 1, result), message, trace_id)


def _record(
    s: Any,
    publisher: Any,
    view: Any,
    raw: Any,
    *,
    by: str,
    usage: Usage,
    unverified: frozenset[tuple[str, str]],
) -> tuple[str, Callable[[], None] | None]:
    submitted = ("proposal.submitted", {"by": by[:200]})
    step = StepWrite(publisher, s, view, [submitted], usage, 1)
    return record_proposal(step, raw, unverified=unverified)


def _known_keys(s: Session, run_id: str, keys: list[Key]) -> dict[str, tuple[int, int, str]]:
    rows = s.execute(
        select(CallerKey.key, CallerKey.step, CallerKey.branch, CallerKey.digest).where(
            CallerKey.run_id == run_id, CallerKey.key.in_([k.key for k in keys])
        )
    ).all()
    return {key: (at, branch, digest) for key, at, branch, digest in rows}


def _remember_keys(s: Session, run_id: str, step: int, keys: list[Key]) -> None:
    """The caller's keys of the step just recorded (in its transaction: both or neither)."""
    for k in keys:
        s.add(CallerKey(run_id=run_id, key=k.key, step=step, branch=k.branch, digest=k.digest))
    if keys:
        s.flush()


def _replay(s: Any, run_id: str, step: int, raw: Any, current: int) -> Submitted:
    """A step already filled: the same proposal is a retry; anything else a conflict."""
    earlier = step_raw(s, run_id, step)
    if earlier is not None and canonical_json(earlier) == canonical_json(raw):
        return Submitted(run_id, step, "replayed", replayed=True)
    raise StateConflict(
        f"step {step} of run {run_id} holds another proposal (the run is at step {current})",
        code="STEP_MISMATCH",
    )
