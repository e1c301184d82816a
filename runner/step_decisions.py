"""The planner step, as pure decisions: may we ask? what did the answer mean?"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from warrant.runner.codes import ObservationKind, RunStatus, StopReason
from warrant.runner.run_machine import Stop
from warrant.runner.spec import ClarifyRequest, FinalAnswer, NoAnswer, PlannerOutput, ToolProposal
from warrant.runner.views import ObservationView, RunView

__all__ = [
    "Complete",
    "Forward",
    "Stop",
    "check_before_planning",
    "interpret",
]

_OUTPUT = TypeAdapter(PlannerOutput)


@dataclass(frozen=True)
class Complete:
    answer: str
    citations: list[str]


@dataclass(frozen=True)
class Forward:
    """A (possibly malformed) tool proposal: the policy gate decides."""

    raw: Any
    proposal_id: str | None
    tool: str | None


def check_before_planning(run: RunView, now: float) -> Stop | None:
    """Deadline and budgets are checked *before* the planner is asked."""
    if now >= run.deadline_at:
        return Stop(RunStatus.FAILED, StopReason.DEADLINE_REACHED)
    if run.step >= run.budgets.max_steps:
        return Stop(RunStatus.FAILED, StopReason.MAX_STEPS_REACHED)
    if run.model_calls >= run.budgets.max_model_calls:
        return Stop(RunStatus.FAILED, StopReason.MAX_MODEL_CALLS_REACHED)
    b = run.budgets
    if b.max_tokens is not None and run.tokens_used >= b.max_tokens:
        return Stop(RunStatus.FAILED, StopReason.MAX_TOKENS_REACHED)
    if b.max_cost is not None and run.cost_used >= b.max_cost:
        return Stop(RunStatus.FAILED, StopReason.MAX_COST_REACHED)
    return None


def validate_final(answer: FinalAnswer, observations: Sequence[ObservationView]) -> Stop | Complete:
    """Every citation must be an existing, final, successful tool-result observation of this
    run (a long-running tool's acceptance is not: ``unfinished`` counts those cited)."""
    results = {
        o.observation_id
        for o in observations
        if o.kind is ObservationKind.TOOL_RESULT and o.succeeded and o.final
    }
    unfinished = {o.observation_id for o in observations if not o.final}
    unknown = [c for c in answer.citations if c not in results]
    if not answer.citations or unknown:
        detail = {"citations": len(answer.citations), "unresolved": len(unknown)}
        if cited_unfinished := sum(c in unfinished for c in unknown):
            detail["unfinished"] = cited_unfinished
        return Stop(RunStatus.FAILED, StopReason.FINAL_CITATION_VALIDATION_FAILED, detail)
    return Complete(answer.answer, list(answer.citations))


def interpret(raw: Any, observations: Sequence[ObservationView]) -> Stop | Complete | Forward:
    """Turn one raw planner output into a decision. Tool proposals always go to the gate."""
    try:
        output = _OUTPUT.validate_python(raw)
    except ValidationError:
        output = None
    if isinstance(output, FinalAnswer):
        return validate_final(output, observations)
    if isinstance(output, NoAnswer):
        return Stop(
            RunStatus.FAILED,
            StopReason.NO_ANSWER,
            {"reason_chars": len(output.reason)},
            answer=output.reason or None,
        )
    if isinstance(output, ClarifyRequest):
        return Stop(
            RunStatus.NEEDS_INPUT,
            StopReason.CLARIFICATION_REQUIRED,
            {"question_chars": len(output.question)},
            answer=output.question,
        )
    if isinstance(output, ToolProposal):
        return Forward(raw, output.proposal_id, output.tool)
    data = raw if isinstance(raw, dict) else {}
    pid = data.get("proposal_id")
    tool = data.get("tool")
    return Forward(
        raw,
        pid if isinstance(pid, str) else None,
        tool if isinstance(tool, str) else None,
    )
