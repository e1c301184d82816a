"""The planner step, as pure decisions: may we ask? what did the answer mean? is it done?

What done means: a run spec's ``success`` conditions, checked against the run's ledger facts
(:func:`warrant.ledger.stage_loads.completion_facts`) when the planner gives a final answer,
never on what the answer cites: citation rules still apply, first and unchanged. A final answer
while a condition does not hold is refused (``SUCCESS_CONDITION_NOT_MET``, which condition in
the detail) and planned again, like an uncited one (``max_refused_finals``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from warrant.runner.codes import ObservationKind, RunStatus, StopReason
from warrant.runner.errors import SpecError
from warrant.runner.run_machine import Stop
from warrant.runner.spec import (
    ArtifactExists,
    ClarifyRequest,
    FinalAnswer,
    NoAnswer,
    PlannerOutput,
    RunSpec,
    SuccessSpec,
    ToolProposal,
    ToolSucceeded,
)
from warrant.runner.views import ObservationView, RunView
from warrant.tools._registry import Registry

__all__ = [
    "Complete",
    "CompletionFacts",
    "Forward",
    "Stop",
    "SucceededCall",
    "Unmet",
    "check_before_planning",
    "check_success",
    "check_success_spec",
    "interpret",
    "refusal_observation",
    "same_json",
    "success_stop",
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
    cap = run.budgets.max_model_calls  # None: the agent's own loop (planner kind external)
    if cap is not None and run.model_calls >= cap:
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


# --- the spec's success conditions ------------------------------------------------------------

#: Why a condition does not hold (stable words, in the trace and the planner's observation).
NO_SUCCEEDED_CALL = "no_succeeded_call"
ARGUMENTS_DIFFER = "arguments_differ"
NO_ARTIFACT = "no_artifact"


@dataclass(frozen=True)
class SucceededCall:
    """A tool call of the run whose outcome succeeded (or was found applied)."""

    tool: str
    tool_version: str
    arguments: Mapping[str, Any]
    """The arguments as the gate validated them (the command's)."""
    step: int


@dataclass(frozen=True)
class CompletionFacts:
    """What the ledger holds for the run: its succeeded calls and its artifacts' paths."""

    succeeded_calls: tuple[SucceededCall, ...] = ()
    artifact_paths: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Unmet:
    """A condition (by its index in ``all_of``) that does not hold, and why."""

    index: int
    condition: ToolSucceeded | ArtifactExists
    why: str

    def traced(self) -> dict[str, Any]:
        """For the trace: names and codes only, never argument values or paths."""
        out: dict[str, Any] = {"index": self.index, "kind": self.condition.kind, "why": self.why}
        if isinstance(self.condition, ToolSucceeded):
            out["tool"] = self.condition.tool
        return out

    def shown(self) -> dict[str, Any]:
        """For the planner: the condition as the spec declares it, and why it fails."""
        declared = self.condition.model_dump(mode="json", exclude_none=True)
        return {"index": self.index, "condition": declared, "why": self.why}


def same_json(a: Any, b: Any) -> bool:
    """Equality of JSON values: ``true`` is not ``1``, ``1`` is ``1.0``, objects and arrays
    compared element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is None and b is None


def _matches(condition: ToolSucceeded, call: SucceededCall) -> bool:
    return all(
        key in call.arguments and same_json(call.arguments[key], value)
        for key, value in condition.arguments.items()
    )


def _tool_unmet(condition: ToolSucceeded, calls: Iterable[SucceededCall]) -> str | None:
    named = [
        c
        for c in calls
        if c.tool == condition.tool
        and (condition.tool_version is None or c.tool_version == condition.tool_version)
    ]
    if not named:
        return NO_SUCCEEDED_CALL
    return None if any(_matches(condition, c) for c in named) else ARGUMENTS_DIFFER


def _artifact_unmet(condition: ArtifactExists, paths: Iterable[str]) -> str | None:
    wanted = posixpath.normpath(condition.path)
    return None if any(posixpath.normpath(p) == wanted for p in paths) else NO_ARTIFACT


def check_success(success: SuccessSpec | None, facts: CompletionFacts) -> list[Unmet]:
    """The conditions of ``success`` that the facts do not satisfy (empty: done)."""
    if success is None:
        return []
    unmet = []
    for index, condition in enumerate(success.all_of):
        if isinstance(condition, ToolSucceeded):
            why = _tool_unmet(condition, facts.succeeded_calls)
        else:
            why = _artifact_unmet(condition, facts.artifact_paths)
        if why is not None:
            unmet.append(Unmet(index, condition, why))
    return unmet


def success_stop(success: SuccessSpec, unmet: list[Unmet]) -> Stop:
    """The stop (or, while ``max_refused_finals`` allows, the refusal) of a final answer given
    while ``unmet`` do not hold; its detail is fit for the trace."""
    detail = {"conditions": len(success.all_of), "unmet": [u.traced() for u in unmet]}
    return Stop(RunStatus.FAILED, StopReason.SUCCESS_CONDITION_NOT_MET, detail)


def refusal_observation(unmet: list[Unmet]) -> dict[str, Any]:
    """What the planner sees in ``policy-<step>`` beyond the code: each unmet condition."""
    return {
        "reason": "the run's success conditions do not hold yet: do what they ask, then answer",
        "unmet": [u.shown() for u in unmet],
    }


def check_success_spec(spec: RunSpec, registry: Registry) -> None:
    """At the run's start: every ``tool_succeeded`` condition names a tool (and version) the
    registry has, and only arguments its input schema knows. Else :class:`SpecError`."""
    if spec.success is None:
        return
    for index, condition in enumerate(spec.success.all_of):
        if isinstance(condition, ToolSucceeded):
            _check_tool_condition(condition, registry, f"success.all_of.{index}")


def _check_tool_condition(condition: ToolSucceeded, registry: Registry, where: str) -> None:
    tools = registry.by_name(condition.tool)
    if condition.tool_version is not None:
        tools = [t for t in tools if t.version == condition.tool_version]
    if not tools:
        version = f"@{condition.tool_version}" if condition.tool_version else ""
        message = f"no tool {condition.tool}{version} in this deployment's registry"
        raise SpecError(message, errors=[{"field": f"{where}.tool", "message": message}])
    unknown: list[str] = []
    for tool in tools:
        schema = tool.input_model.model_json_schema()
        known = set(schema.get("properties") or {})
        closed = schema.get("additionalProperties", True) is False
        unknown = sorted(set(condition.arguments) - known) if closed else []
        if not unknown:
            return  # a version that takes every listed argument
    message = f"{condition.tool} takes no argument {', '.join(unknown)}"
    raise SpecError(message, errors=[{"field": f"{where}.arguments", "message": message}])
