"""Planner step: load, check budgets, ask the planner, record, hand on. Shell only.

A model that cannot answer now (a 429, a 5xx, a timeout) does not hold the worker: the step
records ``model.retry.scheduled`` and re-publishes with a countdown (``ModelRetries``); after
the last attempt the run fails with ``MODEL_FAILED``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from warrant.broker import telemetry
from warrant.broker.context import StageContext
from warrant.broker.faults import crash_point
from warrant.broker.limit_waits import model_limiter
from warrant.broker.planner._run_watch import the_run_watch
from warrant.broker.publish import Outbox
from warrant.ledger.db import session_scope
from warrant.ledger.memory_views import (
    built_event,
    view_from_row,
)
from warrant.ledger.planner_outcomes import (
    StepWrite,
    invalid_output,
    model_failed,
    postpone_wake,
    record_proposal,
    stopped,
)
from warrant.ledger.repo import (
    StaleVersion,
    append_events,
    charge_usage,
    commit,
    run_view,
)
from warrant.ledger.stage_loads import autocommit, load_planning
from warrant.ledger.sweeps import touch_run
from warrant.runner import cancellation
from warrant.runner import run_machine as machine
from warrant.runner.cancellation import CancelSignal
from warrant.runner.codes import (
    Phase,
    RunStatus,
)
from warrant.runner.handoff import artifacts_made, with_artifacts
from warrant.runner.memory_view import DEFAULT_MAX_ITEMS
from warrant.runner.planners import PlannerFailure, PlannerRetryLater, planner_for
from warrant.runner.planners.kinds import planner_kinds
from warrant.runner.retry import MODEL_RETRY_CAP_S, MODEL_RETRY_EVENT, ModelRetries
from warrant.runner.run_machine import Stop
from warrant.runner.spec import ExternalPlannerSpec, FixturePlannerSpec, RunSpec, SuccessSpec, Usage
from warrant.runner.step_decisions import check_before_planning, wake_of
from warrant.runner.views import RunView

__all__ = ["planner_step"]

log = logging.getLogger("warrant.planner")

#: A run's spec never changes once the run exists: each process keeps the specs it parsed
#: last (a fixture planner's spec holds every scripted output, so it is not small). Above the
#: runs a planner process moves at once (1024 threads at most): at 256, a thousand runs in
#: flight each missed, reading and validating their spec again at every step.
SPEC_CACHE_SIZE = 2048
_SPECS: OrderedDict[str, RunSpec] = OrderedDict()
#: Seconds before its retry time a waiting step may run (clocks differ); an earlier delivery (a
#: duplicate, a stall sweep's copy) is dropped: the delayed one is on its way, else the sweep's.
EARLY_TOLERANCE_S = 0.5


def _remember(run_id: str, spec: RunSpec) -> RunSpec:
    _SPECS[run_id] = spec
    while len(_SPECS) > SPEC_CACHE_SIZE:
        _SPECS.popitem(last=False)
    return spec


@dataclass(frozen=True)
class _Answer:
    """What asking the planner gave: an output, an invalid reply, a failure, or "later"."""

    raw: Any = None
    usage: Usage = field(default_factory=Usage)
    calls: int = 0
    failed: dict[str, Any] | None = None
    """``code`` (and after retries ``attempts`` and the ``last`` attempt's code)."""
    invalid: str | None = None
    later: PlannerRetryLater | None = None


def planner_step(ctx: StageContext, run_id: str, version: int) -> str:
    """Returns what happened: ``ignored``, ``stopped``, ``completed``, ``forwarded``,
    ``invalid_output``, ``retry_scheduled``, ``plan_revised``, ``waiting`` (a wait committed, or
    an event wait that looks again later), ``output_refused`` (a plan or wait refused) or, for
    a run whose caller proposes (planner kind ``external``), ``awaiting_proposal`` (deadline
    and budgets checked, nothing asked).

    One read (the run, everything its working-memory view shows and the step's earlier
    attempts) and one write (the transition with the step's proposal), each a single statement
    in autocommit mode: no transaction is open while the planner thinks."""
    spec = _SPECS.get(run_id)
    with autocommit(ctx.engine) as conn:
        row = load_planning(
            conn,
            run_id,
            recent=DEFAULT_MAX_ITEMS * 2,
            memory_keys=ctx.tool_deps.memory.allowed_keys,
            with_spec=spec is None,
        )
    if (
        row is None
        or row.version != version
        or row.status != RunStatus.RUNNING
        or row.phase != Phase.PLANNING
    ):
        log.info("ignoring stale planner message run=%s v=%s", run_id, version)
        return "ignored"
    if spec is None:
        spec = _remember(run_id, RunSpec.model_validate(row.spec))
    retries = ModelRetries.of(row.retries or ())
    held = _held(ctx, row, retries)
    if held is not None:
        return held
    view = replace(run_view(row), model_calls=row.model_calls + retries.calls)
    stop = check_before_planning(view, ctx.clock())
    if stop is not None:
        counters = {"model_calls": view.model_calls} if retries.calls else None
        stop = with_artifacts(stop, artifacts_made(row.made))  # a budget stop lists them
        return _stop(ctx, view, stop, counters=counters)
    if isinstance(spec.planner, ExternalPlannerSpec):
        return "awaiting_proposal"  # the caller proposes (warrant.ledger.external_proposals)
    memory = view_from_row(row, view, registry=ctx.registry)
    if spec.success is not None:  # what the program will check before it accepts a final
        done_when = spec.success.model_dump(mode="json")["all_of"]
        memory = memory.model_copy(update={"done_when": done_when})
    built = built_event(memory, state_version=view.version, now=ctx.clock())
    answer = _ask(ctx, spec, view, memory)
    later = answer.later
    if later is not None:
        cap_s = min(MODEL_RETRY_CAP_S, ctx.settings.stall_after_s / 2)
        decision = retries.decide(later, run=view, now=ctx.clock(), cap_s=cap_s)
        if decision.retry:
            event = retries.event(later, decision, version=version, now=ctx.clock())
            return _retry_later(ctx, view, event)
        answer = replace(answer, later=None, failed=retries.failure(later, decision))
    billed = not isinstance(spec.planner, FixturePlannerSpec)
    made = artifacts_made(row.made)
    return _conclude(
        ctx, view, built, answer, billed=billed, success=spec.success, plan=row.plan, made=made
    )


def _held(ctx: StageContext, row: Any, retries: ModelRetries) -> str | None:
    """Why this delivery does not plan now (None: it does). Before a model retry's time it is
    dropped (a duplicate, a stall sweep's copy: the delayed message is on its way). Before a
    wait's wake time it is sent again for then (a duplicate; or the run's message sent again
    at a new version after a fact was recorded, which the delayed one no longer has). An
    event wait whose event has not happened moves its wake time on (a compare-and-set: of
    duplicates, one goes on polling) and is re-published for it."""
    now = ctx.clock()
    if retries.not_before > now + EARLY_TOLERANCE_S:
        log.info("planner message before its retry time run=%s v=%s", row.id, row.version)
        return "ignored"
    pending = len(row.pending_effects or ())
    wake = wake_of(
        row.waiting,
        step=row.step,
        now=now,
        pending_effects=pending,
        tolerance_s=EARLY_TOLERANCE_S,
    )
    if wake.action == "early" and wake.next_at is not None:
        log.info("planner message before its wake time run=%s v=%s", row.id, row.version)
        _planner_later(ctx, row.id, row.version, wake.next_at - now)
        return "waiting"
    if wake.action == "poll" and wake.next_at is not None:
        with autocommit(ctx.engine) as conn:
            was = float(row.waiting["wake_at"])
            moved = postpone_wake(conn, row.id, step=row.step, was=was, to=wake.next_at)
        if moved:
            _planner_later(ctx, row.id, row.version, wake.next_at - now)
        return "waiting"
    return None


def _conclude(
    ctx: StageContext,
    view: RunView,
    built: Any,
    answer: _Answer,
    *,
    billed: bool,
    success: SuccessSpec | None,
    plan: dict[str, Any] | None = None,
    made: list[dict[str, Any]] | None = None,
) -> str:
    """Commit what the planner's answer means (one statement; an escalation, rare, in a
    transaction: its handoff row too), then hand on. ``success``: the spec's (cached here: a
    final answer's check reads no spec); ``plan``: the run's current plan (a new one revises
    it); ``made``: the run's artifacts (a budget stop lists them)."""
    version, step = view.version, view.step + 1
    before = _events_before(built, answer.usage)
    outbox = Outbox()
    try:
        with _writing(ctx, answer) as conn:
            w = StepWrite(
                ctx.publisher,
                conn,
                view,
                before,
                answer.usage,
                answer.calls,
                plan,
                ctx.clock(),
                made=made or [],
                registry=ctx.registry,
            )
            if answer.invalid is not None:
                result = invalid_output(w, answer.invalid)
            elif answer.failed is not None:
                result = model_failed(w, answer.failed)
            else:
                unverified = ctx.registry.unverified()
                result = record_proposal(w, answer.raw, success=success, unverified=unverified)
    except StaleVersion:
        log.info("planner step lost the race run=%s v=%s", view.run_id, version)
        if billed and answer.calls:  # a real model was called (and billed) all the same
            charge_late(ctx, view, answer.usage, answer.calls, answer.failed, step=step)
        return "ignored"
    crash_point("planner:after_commit", view.run_id)
    if result[1] is not None:
        outbox.add(result[1])
    outbox.flush()
    return result[0]


@contextmanager
def _writing(ctx: StageContext, answer: _Answer) -> Iterator[Any]:
    """Where the step is written: one autocommit statement, or for an escalation (a handoff
    row with the run's change, under the run's lock) a transaction."""
    raw = answer.raw
    escalates = answer.invalid is None and answer.failed is None and isinstance(raw, dict)
    if escalates and raw.get("kind") == "escalate":
        with session_scope(ctx.engine) as s:
            yield s
        return
    with autocommit(ctx.engine) as conn:
        yield conn


def _events_before(built: Any, usage: Usage) -> list[tuple[str, dict[str, Any]]]:
    """The step's first events: the view the planner saw, and what an endpoint that did not
    report (all of) its usage was charged by the estimate."""
    before = [built]
    if usage.estimated:
        estimate = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cost": usage.cost,
        }
        before.append(("model.usage.estimated", estimate))
    return before


def _retry_later(ctx: StageContext, view: RunView, event: dict[str, Any]) -> str:
    """Record the attempt (its cost, when to try again) and re-publish the step with that
    countdown: nothing waits in this process."""
    with session_scope(ctx.engine) as s:
        append_events(s, view.run_id, [(MODEL_RETRY_EVENT, event)], step=view.step + 1)
        touch_run(s, view.run_id)  # progress: the stall sweep leaves the waiting step alone
    outbox = Outbox()
    outbox.add(lambda: _planner_later(ctx, view.run_id, view.version, event["delay_s"]))
    outbox.flush()
    return "retry_scheduled"


def _planner_later(ctx: StageContext, run_id: str, version: int, delay_s: float) -> None:
    """The planner message, delivered after ``delay_s`` (the broker holds it, no worker)."""
    ctx.publisher.planner(run_id, version, countdown=delay_s if delay_s > 0 else None)


def _ask(ctx: StageContext, spec: RunSpec, view: RunView, memory: Any) -> _Answer:
    """The planner's reply, its failure, or its request to be asked later."""
    try:
        with (
            cancel_signal(ctx, spec, view.run_id) as signal,
            cancellation.bound(signal),
            telemetry.span("planner.propose", run_id=view.run_id, step=view.step + 1),
        ):
            reply = planner_for(
                spec,
                prices=ctx.settings.model_prices,
                allow_remote=ctx.settings.allow_remote_models,
                kinds=planner_kinds(
                    refs=ctx.settings.planners, entry_points=ctx.settings.plugin_entry_points
                ),
                limiter=model_limiter(ctx, view.run_id, step=view.step + 1),
            ).propose(view, memory)
    except PlannerRetryLater as exc:  # before PlannerFailure: it is one
        return _Answer(usage=exc.usage, calls=exc.calls, later=exc)
    except PlannerFailure as exc:
        return _Answer(usage=exc.usage, calls=exc.calls, failed={"code": exc.code})
    return _Answer(reply.raw, reply.usage, reply.calls, invalid=reply.invalid)


def _stop(ctx: StageContext, view: RunView, stop: Stop, *, counters: Any = None) -> str:
    """A stop before the planner is asked (``counters``: earlier attempts' model calls)."""
    step = view.step
    try:
        with autocommit(ctx.engine) as conn:
            commit(conn, machine.stop(view, stop, step=step, counters=counters), step=step)
    except StaleVersion:
        return "ignored"
    return stopped(stop)


# -- A planner step's model call and its run's cancellation: the cancel signal the planner is
# given while it thinks (``broker.planner._run_watch``), and the charge for a call whose answer came
# too late to be recorded (the run was cancelled or moved on meanwhile).


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
