"""Planner step: load, check budgets, ask the planner, record, hand on. Shell only."""

from __future__ import annotations

import logging
from typing import Any

from broker import telemetry
from broker.context import StageContext
from broker.faults import crash_point
from broker.publish import Outbox
from broker.transitions import stop_changes, stop_events
from broker.views import POLICY_OBSERVATION_TTL_STEPS, load_view
from ledger.db import session_scope
from ledger.models import Proposal, Run
from ledger.repo import NewObservation, StaleVersion, observations_of, run_view, transition
from runner.codes import (
    ObservationKind,
    ObservationSource,
    Phase,
    Rejection,
    RunStatus,
    StopReason,
)
from runner.planners import PlannerFailure, planner_for
from runner.planning import Complete, Forward, Stop, check_before_planning, interpret
from runner.spec import RunSpec

__all__ = ["planner_step"]

log = logging.getLogger("warrant.planner")


def planner_step(ctx: StageContext, run_id: str, version: int) -> str:
    """Returns what happened: ``ignored``, ``stopped``, ``completed`` or ``forwarded``."""
    with session_scope(ctx.engine) as s:
        run = s.get(Run, run_id)
        if (
            run is None
            or run.version != version
            or run.status != RunStatus.RUNNING
            or run.phase != Phase.PLANNING
        ):
            log.info("ignoring stale planner message run=%s v=%s", run_id, version)
            return "ignored"
        view = run_view(run)
        spec = RunSpec.model_validate(run.spec)
        stop = check_before_planning(view, ctx.clock())
        memory = (
            None if stop else load_view(s, run, registry=ctx.registry, memory=ctx.tool_deps.memory)
        )

    outbox = Outbox()
    if stop is not None or memory is None:
        assert stop is not None
        return _stop(ctx, view.run_id, version, view, stop, step=view.step)
    built = (
        "observation.built",
        {
            "items": len(memory.items),
            "tools": len(memory.tools),
            "preferences": len(memory.preferences),
            "view_hash": memory.view_hash(),
        },
    )

    try:
        with telemetry.span("planner.propose", run_id=run_id, step=view.step + 1):
            reply = planner_for(
                spec,
                prices=ctx.settings.model_prices,
                allow_remote=ctx.settings.allow_remote_models,
            ).propose(view, memory)
        raw: Any = reply.raw
        usage, calls, failure, invalid = reply.usage, reply.calls, None, reply.invalid
    except PlannerFailure as exc:
        raw, usage, calls, failure, invalid = None, exc.usage, exc.calls, exc.code, None

    step = view.step + 1
    counters = {
        "step": step,
        "model_calls": view.model_calls + calls,
        "tokens_used": view.tokens_used + usage.prompt_tokens + usage.completion_tokens,
        "cost_used": view.cost_used + usage.cost,
    }
    if invalid is not None:
        try:
            with session_scope(ctx.engine) as s:
                _invalid_output(ctx, s, run_id, version, step, counters, built, invalid, outbox)
        except StaleVersion:
            return "ignored"
        crash_point("planner:after_commit", run_id)
        outbox.flush()
        return "invalid_output"
    try:
        with session_scope(ctx.engine) as s:
            if failure is not None:
                reason = (
                    StopReason.DEADLINE_REACHED
                    if failure == "DEADLINE_REACHED"
                    else StopReason.MODEL_FAILED
                )
                stop = Stop(RunStatus.FAILED, reason, {"code": failure})
                transition(
                    s,
                    run_id,
                    version,
                    changes={**counters, **stop_changes(stop)},
                    events=[
                        built,
                        ("model.failed", {"code": failure}),
                        *stop_events(view, stop, step=step, counters=counters),
                    ],
                    step=step,
                )
                return "stopped"
            final = isinstance(raw, dict) and raw.get("kind") == "final"
            decision = interpret(raw, observations_of(s, run_id) if final else [])
            kind = raw.get("kind") if isinstance(raw, dict) else None
            proposal = Proposal(
                run_id=run_id,
                step=step,
                kind=str(kind)[:16] if kind else "invalid",
                proposal_id=decision.proposal_id if isinstance(decision, Forward) else None,
                tool=decision.tool[:200]
                if isinstance(decision, Forward) and decision.tool
                else None,
                raw=raw,
                observation_version=view.observation_version,
                status="received",
            )
            version_raw = raw.get("tool_version") if isinstance(raw, dict) else None
            if isinstance(version_raw, str):
                proposal.tool_version = version_raw[:50]
            s.add(proposal)
            s.flush()
            received = (
                "proposal.received",
                {
                    "kind": proposal.kind,
                    "tool": proposal.tool,
                    "model_calls": counters["model_calls"],
                    "tokens": usage.prompt_tokens + usage.completion_tokens,
                },
            )
            if isinstance(decision, Forward):
                new_version = transition(
                    s,
                    run_id,
                    version,
                    changes={
                        **counters,
                        "phase": Phase.POLICY.value,
                        "pending_proposal_id": proposal.id,
                    },
                    events=[built, received],
                    step=step,
                    proposal_id=proposal.proposal_id,
                )
                outbox.add(lambda: ctx.publisher.policy(run_id, new_version))
                result = "forwarded"
            elif isinstance(decision, Complete):
                proposal.status = "accepted"
                done = Stop(
                    RunStatus.COMPLETED,
                    StopReason.FINAL_ANSWER_VALIDATED,
                    {"citations": len(decision.citations)},
                    answer=decision.answer,
                )
                transition(
                    s,
                    run_id,
                    version,
                    changes={**counters, **stop_changes(done)},
                    events=[
                        built,
                        received,
                        ("final.validated", {"citations": decision.citations}),
                        *stop_events(view, done, step=step, counters=counters),
                    ],
                    step=step,
                )
                result = "completed"
            else:
                proposal.status = "rejected" if decision.status is RunStatus.FAILED else "accepted"
                transition(
                    s,
                    run_id,
                    version,
                    changes={**counters, **stop_changes(decision)},
                    events=[
                        built,
                        received,
                        *stop_events(view, decision, step=step, counters=counters),
                    ],
                    step=step,
                )
                result = "stopped"
    except StaleVersion:
        log.info("planner step lost the race run=%s v=%s", run_id, version)
        return "ignored"
    crash_point("planner:after_commit", run_id)
    outbox.flush()
    return result


def _stop(ctx: StageContext, run_id: str, version: int, view: Any, stop: Stop, *, step: int) -> str:
    try:
        with session_scope(ctx.engine) as s:
            transition(
                s,
                run_id,
                version,
                changes=stop_changes(stop),
                events=stop_events(view, stop, step=step),
                step=step,
            )
    except StaleVersion:
        return "ignored"
    return "stopped"


def _invalid_output(
    ctx: StageContext,
    s: Any,
    run_id: str,
    version: int,
    step: int,
    counters: dict[str, Any],
    built: tuple[str, dict[str, Any]],
    reason: str,
    outbox: Outbox,
) -> str:
    """An unparseable model reply: refused like a policy rejection; the step is re-planned."""
    s.add(
        Proposal(
            run_id=run_id,
            step=step,
            kind="invalid",
            raw=None,
            observation_version=0,
            status="rejected",
            rejection_code=Rejection.MODEL_OUTPUT_INVALID.value,
        )
    )
    new_version = transition(
        s,
        run_id,
        version,
        changes=counters,
        events=[
            built,
            ("model.output.invalid", {"reason": reason}),
            (
                "proposal.rejected",
                {"code": Rejection.MODEL_OUTPUT_INVALID.value, "layer": "parse", "reason": reason},
            ),
        ],
        step=step,
        observation=NewObservation(
            f"policy-{step}",
            ObservationKind.POLICY_REJECTION,
            ObservationSource.POLICY.value,
            {"code": Rejection.MODEL_OUTPUT_INVALID.value, "reason": reason},
            step + POLICY_OBSERVATION_TTL_STEPS,
        ),
    )
    outbox.add(lambda: ctx.publisher.planner(run_id, new_version))
    return "invalid_output"
