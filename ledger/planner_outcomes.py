"""What one planner output means, committed: a proposal forwarded to the gate, a final
answer, a question, a stop, an unparseable reply, a failed model. Shared by the planner step
(:mod:`warrant.broker.planner.stage`) and a caller's own proposals
(:mod:`warrant.ledger.external_proposals`). Each function writes one transition on the
:class:`StepWrite`'s ``conn`` and returns the task's result and the message to publish after
the commit (or None).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from warrant.ledger._compiled import Compiled
from warrant.ledger.guarded import insert_proposal
from warrant.ledger.memory_views import POLICY_OBSERVATION_TTL_STEPS
from warrant.ledger.proposal_facts import refused_finals
from warrant.ledger.repo import NewObservation, StaleVersion, commit, observations_of
from warrant.ledger.rows import BundleFacts, add_handoff, handoff_bundle, lock_run
from warrant.ledger.stage_loads import completion_facts, success_of
from warrant.runner import run_machine as machine
from warrant.runner.canonical import echoed_name, raw_arguments_hash
from warrant.runner.codes import (
    ObservationKind,
    ObservationSource,
    Rejection,
    RunStatus,
    StopReason,
)
from warrant.runner.gate import cited_sources
from warrant.runner.handoff import escalated_by, with_artifacts
from warrant.runner.run_machine import Stop
from warrant.runner.spec import Usage
from warrant.runner.step_decisions import (
    Complete,
    Escalate,
    Forward,
    Hold,
    Refuse,
    Revise,
    check_success,
    check_wait,
    interpret,
    plan_revision,
    refusal_observation,
    success_stop,
    unverified_successes,
)
from warrant.runner.views import RunView

__all__ = [
    "Result",
    "StepWrite",
    "invalid_output",
    "model_failed",
    "postpone_wake",
    "record_proposal",
    "stopped",
]

Result = tuple[str, Callable[[], None] | None]


@dataclass(frozen=True)
class StepWrite:
    """One planner output's step (the run's next), written on ``conn``; ``publisher`` sends
    what follows the commit."""

    publisher: Any
    conn: Any
    view: RunView
    built: Sequence[tuple[str, dict[str, Any]]]
    """The events recorded before the output's own (the working-memory view the planner saw,
    or who submitted an external proposal)."""
    usage: Usage
    calls: int
    """The model calls the output took (charged with the step)."""
    plan: dict[str, Any] | None = None
    """The run's current plan (its next revision follows it; an identical one is refused)."""
    now: float | None = None
    """The stage's clock (epoch seconds) a wait's wake time counts from; None: this host's."""
    made: Sequence[dict[str, Any]] = ()
    """The run's artifacts, from the load (a budget stop lists them)."""
    registry: Any = None
    """The tool registry (an escalation's bundle masks sensitive arguments; None: all)."""

    @property
    def step(self) -> int:
        return self.view.step + 1

    @property
    def counters(self) -> dict[str, Any]:
        """The run's counters after the step: its model calls and their usage charged."""
        view, usage = self.view, self.usage
        return {
            "step": self.step,
            "model_calls": view.model_calls + self.calls,
            "tokens_used": view.tokens_used + usage.prompt_tokens + usage.completion_tokens,
            "cost_used": view.cost_used + usage.cost,
        }


#: A planner failure that is a run's own limit stops the run with that limit's reason.
_FAILURE_STOPS = {
    r.value: r
    for r in (
        StopReason.DEADLINE_REACHED,
        StopReason.MAX_TOKENS_REACHED,
        StopReason.MAX_COST_REACHED,
    )
}


def model_failed(w: StepWrite, failed: dict[str, Any]) -> Result:
    reason = _FAILURE_STOPS.get(failed["code"], StopReason.MODEL_FAILED)
    stop = with_artifacts(Stop(RunStatus.FAILED, reason, dict(failed)), w.made)
    change = machine.stop(
        w.view,
        stop,
        step=w.step,
        counters=w.counters,
        events=[*w.built, ("model.failed", dict(failed))],
    )
    commit(w.conn, change, step=w.step)
    return stopped(stop), None


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


#: ``record_proposal``'s default: read the run's success declaration from the ledger.
_READ: Any = object()


def record_proposal(
    w: StepWrite,
    raw: Any,
    *,
    success: Any = _READ,
    unverified: frozenset[tuple[str, str]] = frozenset(),
) -> Result:
    """``success``: the spec's success declaration when the caller has the spec at hand (the
    planner stage caches it); by default it is read when a final answer needs it.
    ``unverified``: ``(name, version)`` of the registry's ``unverified`` writes (a success
    condition they satisfy is flagged ``verified: false``)."""
    conn, view, step, counters, usage = w.conn, w.view, w.step, w.counters, w.usage
    run_id = view.run_id
    final = isinstance(raw, dict) and raw.get("kind") == "final"
    decision = interpret(raw, observations_of(conn, run_id) if final else [])
    shown: dict[str, Any] = {}
    if isinstance(decision, Complete):
        decision, shown = _checked_success(conn, run_id, decision, success, unverified)
    proposal = _proposal_row(view, step, raw, decision)
    received = {
        "kind": proposal["kind"],
        "tool": echoed_name(proposal["tool"]) if proposal["tool"] else proposal["tool"],
        "model_calls": counters["model_calls"],
        "tokens": usage.prompt_tokens + usage.completion_tokens,
    }
    if (args_hash := raw_arguments_hash(raw)) is not None:
        received["arguments_hash"] = args_hash
    if isinstance(decision, Revise | Hold | Refuse):
        return _noted(w, decision, proposal, received)
    if isinstance(decision, Escalate):
        return _escalate(w, proposal, received, decision)
    if isinstance(decision, Forward):
        change = machine.forward_proposal(
            view, received=received, counters=counters, events=list(w.built)
        )
        new_version = commit(
            conn,
            change,
            step=step,
            proposal_id=decision.proposal_id,
            guarded=[insert_proposal(proposal, pending=True)],
        )
        return "forwarded", lambda: w.publisher.policy(run_id, new_version)
    if _refusable_final(conn, view, decision):
        assert isinstance(decision, Stop)
        refused = _Refused(decision, shown)
        return _refuse_final(w, proposal, refused)
    stop, extra, result = _ending(decision, proposal)
    change = machine.stop(
        view,
        stop,
        step=step,
        counters=counters,
        events=[*w.built, ("proposal.received", received), *extra],
    )
    commit(conn, change, step=step, guarded=[insert_proposal(proposal)])
    return result, None


def _escalate(
    w: StepWrite, proposal: dict[str, Any], received: dict[str, Any], decision: Escalate
) -> Result:
    """The planner hands the run to a person (its evidence is insufficient or conflicting):
    the bundle as every handoff's, the handoff row, the step's proposal and its counters, in
    the caller's transaction (``w.conn`` is a session; the run is locked here)."""
    s, view, reason = w.conn, w.view, decision.reason.value
    if not isinstance(s, Session):
        raise TypeError("an escalation is written in a session (the handoff row and the run's)")
    run = lock_run(s, view.run_id)
    if run is None or run.version != view.version:
        raise StaleVersion(f"run {view.run_id} is no longer at version {view.version}")
    escalated = escalated_by(reason, decision.said)
    facts = BundleFacts(counters=w.counters, escalated=escalated, now=time.time())
    bundle = handoff_bundle(s, run, reason=reason, registry=w.registry, facts=facts)
    handoff_id = add_handoff(s, run.id, reason=reason, bundle=bundle)
    proposal["status"] = "accepted"
    said = {"reason": reason, "said_chars": len(decision.said)}
    events = [*w.built, ("proposal.received", received), ("planner.escalated", said)]
    change = machine.hand_off(
        view, handoff_id=handoff_id, reason=reason, events=events, counters=w.counters
    )
    commit(s, change, step=w.step, guarded=[insert_proposal(proposal)])
    return f"handoff:{reason}", None


def _ending(
    decision: Complete | Stop, proposal: dict[str, Any]
) -> tuple[Stop, list[tuple[str, dict[str, Any]]], str]:
    """How a step that ends the run ends it: its stop, extra events and the task's result
    (``proposal``'s status set to match)."""
    if isinstance(decision, Complete):
        proposal["status"] = "accepted"
        # a success condition only an unverified write's word satisfies is said to be so
        flagged = {"unverified": list(decision.unverified)} if decision.unverified else {}
        stop = Stop(
            RunStatus.COMPLETED,
            StopReason.FINAL_ANSWER_VALIDATED,
            {"citations": len(decision.citations), **flagged},
            answer=decision.answer,
        )
        validated = {"citations": decision.citations, **flagged}
        return stop, [("final.validated", validated)], "completed"
    proposal["status"] = "rejected" if decision.status is RunStatus.FAILED else "accepted"
    return decision, [], stopped(decision)


def _checked_success(
    conn: Any, run_id: str, done: Complete, success: Any, unverified: frozenset[tuple[str, str]]
) -> tuple[Complete | Stop, dict[str, Any]]:
    """A cited final answer, checked against the spec's success conditions on the ledger's
    facts: ``done`` (with the conditions only an unverified write's word satisfies), or the
    stop that refuses it and what the planner is shown about why."""
    if success is _READ:
        success = success_of(conn, run_id)
    if success is None:
        return done, {}
    facts = completion_facts(conn, run_id, unverified=unverified)
    unmet = check_success(success, facts)
    if not unmet:
        flagged = tuple(unverified_successes(success, facts))
        return (dataclasses.replace(done, unverified=flagged) if flagged else done), {}
    return success_stop(success, unmet), refusal_observation(unmet)


#: Final answers refused at their step (and planned again while ``max_refused_finals`` allows).
_REFUSABLE_FINALS = frozenset(
    {StopReason.FINAL_CITATION_VALIDATION_FAILED, StopReason.SUCCESS_CONDITION_NOT_MET}
)


def _refusable_final(conn: Any, view: RunView, decision: Any) -> bool:
    """A final answer whose citations fail or whose success conditions do not hold, while the
    spec allows another round."""
    return (
        isinstance(decision, Stop)
        and decision.reason in _REFUSABLE_FINALS
        and refused_finals(conn, view.run_id) < view.budgets.max_refused_finals
    )


@dataclass(frozen=True)
class _Refused:
    stop: Stop
    """The stop the final answer would be, were no round left."""
    shown: dict[str, Any]
    """What the planner sees beyond the code and the stop's detail (may be empty)."""


def _refuse_final(w: StepWrite, proposal: dict[str, Any], refused: _Refused) -> Result:
    """A final answer that cites nothing usable, or given while the spec's success conditions
    do not hold: refused like a policy rejection (the planner sees why in ``policy-<step>``)
    and the step planned again (``max_refused_finals``)."""
    code = refused.stop.reason.value
    proposal.update(status="rejected", rejection_code=code)
    details = {"code": code, "layer": "final", **refused.stop.detail}
    seen = {**details, "reason": _CITE, **refused.shown}
    cited = {"source_observation_ids": cited_sources(proposal.get("raw"))}
    why = [("proposal.rejected", details | cited)]
    refusal = _Refusal(why, seen, proposal)
    return "final_refused", _replan(w, refusal)


_CITE = "cite the id of a final, successful tool result (tool-<step>)"


@dataclass(frozen=True)
class _Refusal:
    why: list[tuple[str, dict[str, Any]]]
    """The trace events that say why (``proposal.rejected`` among them)."""
    observation: dict[str, Any]
    """What the planner sees in ``policy-<step>``."""
    proposal: dict[str, Any]
    """The step's proposal row."""


def _replan(w: StepWrite, refusal: _Refusal) -> Callable[[], None]:
    """A planner output refused at the step: its observation for the planner, the proposal row,
    and the step planned again (the publish to run after the commit)."""
    step = w.step
    change = machine.replan(w.view, why=refusal.why, counters=w.counters, events=list(w.built))
    new_version = commit(
        w.conn,
        change,
        step=step,
        observation=NewObservation(
            f"policy-{step}",
            ObservationKind.POLICY_REJECTION,
            ObservationSource.POLICY.value,
            refusal.observation,
            step + POLICY_OBSERVATION_TTL_STEPS,
        ),
        guarded=[insert_proposal(refusal.proposal)],
    )
    run_id, publisher = w.view.run_id, w.publisher
    return lambda: publisher.planner(run_id, new_version)


def _noted(
    w: StepWrite, decision: Revise | Hold | Refuse, proposal: dict[str, Any], received: Any
) -> Result:
    """A plan or a wait: a step with no tool call. A plan is stored as the run's latest
    (``plan.revised``) and the next step planned at once; a wait is stored for the run's next
    version (``planner.waiting``) and the step re-published for its wake time. One refused
    (its shape, an unchanged plan, a wait too long or past the deadline) is planned again."""
    view, now = w.view, time.time() if w.now is None else w.now
    noted: dict[str, Any] | Refuse = decision if isinstance(decision, Refuse) else {}
    if isinstance(decision, Revise):
        noted = plan_revision(decision.plan, w.plan, step=w.step)
    elif isinstance(decision, Hold):
        b = view.budgets
        noted = check_wait(
            decision.wait,
            now=now,
            deadline_at=view.deadline_at,
            max_wait_s=b.max_wait_s,
            step=w.step,
        )
    got = ("proposal.received", received)
    if isinstance(noted, Refuse):
        code = noted.code.value
        proposal.update(status="rejected", rejection_code=code)
        details = {"code": code, "layer": "step", "reason": noted.reason}
        return "output_refused", _replan(
            w, _Refusal([got, ("proposal.rejected", details)], details, proposal)
        )
    proposal["status"] = "accepted"
    if isinstance(decision, Revise):
        column, delay_s, result = "plan", None, "plan_revised"
        counts = {"nodes": len(noted["nodes"]), "open_questions": len(noted["open_questions"])}
        event = ("plan.revised", {"revision": noted["revision"], **counts})
    else:
        column, delay_s, result = "waiting", max(0.0, noted["wake_at"] - now), "waiting"
        shown = ("seconds", "until", "max_seconds", "wake_at", "until_at")
        event = ("planner.waiting", {k: noted[k] for k in shown if k in noted})
    counters = {**w.counters, column: noted}
    change = machine.replan(view, why=[got, event], counters=counters, events=list(w.built))
    new_version = commit(w.conn, change, step=w.step, guarded=[insert_proposal(proposal)])
    run_id, publisher = view.run_id, w.publisher
    return result, lambda: publisher.planner(run_id, new_version, countdown=delay_s or None)


_POSTPONE = Compiled.text(
    """
UPDATE runs SET waiting = jsonb_set(waiting::jsonb, '{wake_at}', to_jsonb(%(to)s::float8))
 WHERE id = %(run_id)s AND step = %(step)s AND status = 'running'
   AND (waiting::jsonb ->> 'step')::int = %(step)s
   AND (waiting::jsonb ->> 'wake_at')::float8 = %(was)s::float8
RETURNING id
"""
)


def postpone_wake(conn: Any, run_id: str, *, step: int, was: float, to: float) -> bool:
    """An event wait looks again at ``to``: its wake time moved on from ``was``, while the run
    is still at the wait's ``step`` (a compare-and-set, so of duplicate deliveries one goes on
    polling; the stalled-run sweep leaves the run alone until then). False: another moved it,
    or the run moved on. The run's version stays (its wait is still the one committed)."""
    moved = _POSTPONE.first(conn, {"run_id": run_id, "step": step, "was": was, "to": to})
    return moved is not None


def stopped(stop: Stop) -> str:
    """The task's result for a stop: ``stopped:<status>:<reason>`` (see broker.tasks)."""
    return f"stopped:{stop.status.value}:{stop.reason.value}"


def invalid_output(w: StepWrite, reason: str) -> Result:
    """An unparseable model reply: refused like a policy rejection; the step is re-planned."""
    code = Rejection.MODEL_OUTPUT_INVALID.value
    why: list[tuple[str, dict[str, Any]]] = [
        ("model.output.invalid", {"reason": reason}),
        (
            "proposal.rejected",
            {"code": code, "layer": "parse", "reason": reason, "source_observation_ids": []},
        ),
    ]
    proposal = {
        "run_id": w.view.run_id,
        "step": w.step,
        "kind": "invalid",
        "raw": None,
        "observation_version": 0,
        "status": "rejected",
        "rejection_code": code,
    }
    refusal = _Refusal(why, {"code": code, "reason": reason}, proposal)
    return "invalid_output", _replan(w, refusal)
