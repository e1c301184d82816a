"""What one planner output means, committed: a proposal forwarded to the gate, a final
answer, a question, a stop, an unparseable reply, a failed model. Shared by the planner step
(:mod:`warrant.broker.planner.stage`) and a caller's own proposals
(:mod:`warrant.ledger.external_proposals`). Each function writes one transition on the
:class:`StepWrite`'s ``conn`` and returns the task's result and the message to publish after
the commit (or None).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from warrant.ledger.guarded import insert_proposal
from warrant.ledger.memory_views import POLICY_OBSERVATION_TTL_STEPS
from warrant.ledger.proposal_facts import refused_finals
from warrant.ledger.repo import NewObservation, commit, observations_of
from warrant.ledger.stage_loads import completion_facts, success_of
from warrant.runner import run_machine as machine
from warrant.runner.codes import (
    ObservationKind,
    ObservationSource,
    Rejection,
    RunStatus,
    StopReason,
)
from warrant.runner.run_machine import Stop
from warrant.runner.spec import Usage
from warrant.runner.step_decisions import (
    Complete,
    Forward,
    check_success,
    interpret,
    refusal_observation,
    success_stop,
)
from warrant.runner.views import RunView

__all__ = ["Result", "StepWrite", "invalid_output", "model_failed", "record_proposal", "stopped"]

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
    stop = Stop(RunStatus.FAILED, reason, dict(failed))
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


def record_proposal(w: StepWrite, raw: Any, *, success: Any = _READ) -> Result:
    """``success``: the spec's success declaration when the caller has the spec at hand (the
    planner stage caches it); by default it is read when a final answer needs it."""
    conn, view, step, counters, usage = w.conn, w.view, w.step, w.counters, w.usage
    run_id = view.run_id
    final = isinstance(raw, dict) and raw.get("kind") == "final"
    decision = interpret(raw, observations_of(conn, run_id) if final else [])
    shown: dict[str, Any] = {}
    if isinstance(decision, Complete):
        decision, shown = _checked_success(conn, run_id, decision, success)
    proposal = _proposal_row(view, step, raw, decision)
    received = {
        "kind": proposal["kind"],
        "tool": proposal["tool"],
        "model_calls": counters["model_calls"],
        "tokens": usage.prompt_tokens + usage.completion_tokens,
    }
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


def _ending(
    decision: Complete | Stop, proposal: dict[str, Any]
) -> tuple[Stop, list[tuple[str, dict[str, Any]]], str]:
    """How a step that ends the run ends it: its stop, extra events and the task's result
    (``proposal``'s status set to match)."""
    if isinstance(decision, Complete):
        proposal["status"] = "accepted"
        stop = Stop(
            RunStatus.COMPLETED,
            StopReason.FINAL_ANSWER_VALIDATED,
            {"citations": len(decision.citations)},
            answer=decision.answer,
        )
        return stop, [("final.validated", {"citations": decision.citations})], "completed"
    proposal["status"] = "rejected" if decision.status is RunStatus.FAILED else "accepted"
    return decision, [], stopped(decision)


def _checked_success(
    conn: Any, run_id: str, done: Complete, success: Any
) -> tuple[Complete | Stop, dict[str, Any]]:
    """A cited final answer, checked against the spec's success conditions on the ledger's
    facts: ``done``, or the stop that refuses it and what the planner is shown about why."""
    if success is _READ:
        success = success_of(conn, run_id)
    if success is None:
        return done, {}
    unmet = check_success(success, completion_facts(conn, run_id))
    if not unmet:
        return done, {}
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
    why = [("proposal.rejected", details)]
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


def stopped(stop: Stop) -> str:
    """The task's result for a stop: ``stopped:<status>:<reason>`` (see broker.tasks)."""
    return f"stopped:{stop.status.value}:{stop.reason.value}"


def invalid_output(w: StepWrite, reason: str) -> Result:
    """An unparseable model reply: refused like a policy rejection; the step is re-planned."""
    code = Rejection.MODEL_OUTPUT_INVALID.value
    why = [
        ("model.output.invalid", {"reason": reason}),
        ("proposal.rejected", {"code": code, "layer": "parse", "reason": reason}),
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
