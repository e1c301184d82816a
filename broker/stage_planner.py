"""Planner step: load, check budgets, ask the planner, record, hand on. Shell only."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from warrant.broker import telemetry
from warrant.broker.context import StageContext
from warrant.broker.faults import crash_point
from warrant.broker.memory_views import POLICY_OBSERVATION_TTL_STEPS, view_from_row
from warrant.broker.publish import Outbox
from warrant.ledger.guarded import insert_proposal
from warrant.ledger.repo import NewObservation, StaleVersion, commit, observations_of, run_view
from warrant.ledger.stage_loads import autocommit, load_planning
from warrant.runner import run_machine as machine
from warrant.runner.codes import (
    ObservationKind,
    ObservationSource,
    Phase,
    Rejection,
    RunStatus,
    StopReason,
)
from warrant.runner.memory_view import DEFAULT_MAX_ITEMS
from warrant.runner.planner_kinds import planner_kinds
from warrant.runner.planners import PlannerFailure, planner_for
from warrant.runner.run_machine import Stop
from warrant.runner.spec import RunSpec
from warrant.runner.step_decisions import Complete, Forward, check_before_planning, interpret
from warrant.runner.views import RunView

__all__ = ["planner_step"]

log = logging.getLogger("warrant.planner")


#: A run's spec never changes once the run exists: each process keeps the specs it parsed
#: last (a fixture planner's spec holds every scripted output, so it is not small).
SPEC_CACHE_SIZE = 256
_SPECS: OrderedDict[str, RunSpec] = OrderedDict()


def _remember(run_id: str, spec: RunSpec) -> RunSpec:
    _SPECS[run_id] = spec
    while len(_SPECS) > SPEC_CACHE_SIZE:
        _SPECS.popitem(last=False)
    return spec


def planner_step(ctx: StageContext, run_id: str, version: int) -> str:
    """Returns what happened: ``ignored``, ``stopped``, ``completed`` or ``forwarded``.

    One read (the run and everything its working-memory view shows) and one write (the
    transition with the step's proposal), each a single statement in autocommit mode: no
    transaction is open while the planner thinks."""
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
    view = run_view(row)
    stop = check_before_planning(view, ctx.clock())
    if stop is not None:
        return _stop(ctx, view.run_id, version, view, stop, step=view.step)
    if spec is None:
        spec = _remember(run_id, RunSpec.model_validate(row.spec))
    memory = view_from_row(row, view, registry=ctx.registry)
    outbox = Outbox()
    built = _built(memory)
    raw, usage, calls, failure, invalid = _ask(ctx, spec, view, memory)
    step = view.step + 1
    counters = {
        "step": step,
        "model_calls": view.model_calls + calls,
        "tokens_used": view.tokens_used + usage.prompt_tokens + usage.completion_tokens,
        "cost_used": view.cost_used + usage.cost,
    }
    try:
        with autocommit(ctx.engine) as conn:
            if invalid is not None:
                result = _invalid_output(ctx, conn, view, step, counters, built, invalid)
            elif failure is not None:
                result = _model_failed(conn, view, version, step, counters, built, failure)
            else:
                result = _record_proposal(
                    ctx, conn, view, version, step, counters, built, raw, usage, calls
                )
    except StaleVersion:
        log.info("planner step lost the race run=%s v=%s", run_id, version)
        return "ignored"
    crash_point("planner:after_commit", run_id)
    if result[1] is not None:
        outbox.add(result[1])
    outbox.flush()
    return result[0]


def _built(memory: Any) -> tuple[str, dict[str, Any]]:
    """The ``observation.built`` event: what the planner was shown (sizes and a hash)."""
    details = {
        "items": len(memory.items),
        "tools": len(memory.tools),
        "preferences": len(memory.preferences),
        "view_hash": memory.view_hash(),
    }
    return ("observation.built", details)


def _ask(ctx: StageContext, spec: RunSpec, view: RunView, memory: Any) -> tuple[Any, ...]:
    """The planner's reply: ``(raw, usage, calls, failure code, invalid reason)``."""
    try:
        with telemetry.span("planner.propose", run_id=view.run_id, step=view.step + 1):
            reply = planner_for(
                spec,
                prices=ctx.settings.model_prices,
                allow_remote=ctx.settings.allow_remote_models,
                kinds=planner_kinds(
                    refs=ctx.settings.planners, entry_points=ctx.settings.plugin_entry_points
                ),
            ).propose(view, memory)
    except PlannerFailure as exc:
        return None, exc.usage, exc.calls, exc.code, None
    return reply.raw, reply.usage, reply.calls, None, reply.invalid


_Result = tuple[str, Callable[[], None] | None]


def _model_failed(
    conn: Any,
    view: RunView,
    version: int,
    step: int,
    counters: dict[str, Any],
    built: tuple[str, dict[str, Any]],
    failure: str,
) -> _Result:
    deadline = failure == "DEADLINE_REACHED"
    reason = StopReason.DEADLINE_REACHED if deadline else StopReason.MODEL_FAILED
    stop = Stop(RunStatus.FAILED, reason, {"code": failure})
    change = machine.stop(
        view,
        stop,
        step=step,
        counters=counters,
        events=[built, ("model.failed", {"code": failure})],
    )
    commit(conn, change, step=step)
    return "stopped", None


def _proposal_row(view: RunView, step: int, raw: Any, decision: Any) -> dict[str, Any]:
    """The step's proposal row (lengths capped: the raw reply is untrusted)."""
    kind = raw.get("kind") if isinstance(raw, dict) else None
    forward = isinstance(decision, Forward)
    proposal: dict[str, Any] = {
        "run_id": view.run_id,
        "step": step,
        "kind": str(kind)[:16] if kind else "invalid",
        "proposal_id": decision.proposal_id if forward else None,
        "tool": decision.tool[:200] if forward and decision.tool else None,
        "raw": raw,
        "observation_version": view.observation_version,
        "status": "received",
    }
    version_raw = raw.get("tool_version") if isinstance(raw, dict) else None
    if isinstance(version_raw, str):
        proposal["tool_version"] = version_raw[:50]
    return proposal


def _record_proposal(
    ctx: StageContext,
    conn: Any,
    view: RunView,
    version: int,
    step: int,
    counters: dict[str, Any],
    built: tuple[str, dict[str, Any]],
    raw: Any,
    usage: Any,
    calls: int,
) -> _Result:
    run_id = view.run_id
    final = isinstance(raw, dict) and raw.get("kind") == "final"
    decision = interpret(raw, observations_of(conn, run_id) if final else [])
    proposal = _proposal_row(view, step, raw, decision)
    received = {
        "kind": proposal["kind"],
        "tool": proposal["tool"],
        "model_calls": counters["model_calls"],
        "tokens": usage.prompt_tokens + usage.completion_tokens,
    }
    if isinstance(decision, Forward):
        change = machine.forward_proposal(
            view, received=received, counters=counters, events=[built]
        )
        new_version = commit(
            conn,
            change,
            step=step,
            proposal_id=decision.proposal_id,
            guarded=[insert_proposal(proposal, pending=True)],
        )
        return "forwarded", lambda: ctx.publisher.policy(run_id, new_version)
    if isinstance(decision, Complete):
        proposal["status"] = "accepted"
        stop = Stop(
            RunStatus.COMPLETED,
            StopReason.FINAL_ANSWER_VALIDATED,
            {"citations": len(decision.citations)},
            answer=decision.answer,
        )
        extra = [("final.validated", {"citations": decision.citations})]
        result = "completed"
    else:
        proposal["status"] = "rejected" if decision.status is RunStatus.FAILED else "accepted"
        stop, extra, result = decision, [], "stopped"
    change = machine.stop(
        view,
        stop,
        step=step,
        counters=counters,
        events=[built, ("proposal.received", received), *extra],
    )
    commit(conn, change, step=step, guarded=[insert_proposal(proposal)])
    return result, None


def _stop(ctx: StageContext, run_id: str, version: int, view: Any, stop: Stop, *, step: int) -> str:
    try:
        with autocommit(ctx.engine) as conn:
            commit(conn, machine.stop(view, stop, step=step), step=step)
    except StaleVersion:
        return "ignored"
    return "stopped"


def _invalid_output(
    ctx: StageContext,
    conn: Any,
    view: RunView,
    step: int,
    counters: dict[str, Any],
    built: tuple[str, dict[str, Any]],
    reason: str,
) -> _Result:
    """An unparseable model reply: refused like a policy rejection; the step is re-planned."""
    code = Rejection.MODEL_OUTPUT_INVALID.value
    change = machine.replan(
        view,
        why=[
            ("model.output.invalid", {"reason": reason}),
            ("proposal.rejected", {"code": code, "layer": "parse", "reason": reason}),
        ],
        counters=counters,
        events=[built],
    )
    new_version = commit(
        conn,
        change,
        step=step,
        observation=NewObservation(
            f"policy-{step}",
            ObservationKind.POLICY_REJECTION,
            ObservationSource.POLICY.value,
            {"code": code, "reason": reason},
            step + POLICY_OBSERVATION_TTL_STEPS,
        ),
        guarded=[
            insert_proposal(
                {
                    "run_id": view.run_id,
                    "step": step,
                    "kind": "invalid",
                    "raw": None,
                    "observation_version": 0,
                    "status": "rejected",
                    "rejection_code": code,
                }
            )
        ],
    )
    run_id = view.run_id
    return "invalid_output", lambda: ctx.publisher.planner(run_id, new_version)
