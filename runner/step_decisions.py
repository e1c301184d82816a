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

from warrant.runner.codes import ObservationKind, Rejection, RunStatus, StopReason
from warrant.runner.errors import SpecError
from warrant.runner.planning import Plan, Wait
from warrant.runner.run_machine import Stop
from warrant.runner.spec import (
    ArtifactExists,
    ClarifyRequest,
    EscalateRequest,
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
    "Escalate",
    "Forward",
    "Hold",
    "Refuse",
    "Revise",
    "Stop",
    "SucceededCall",
    "Unmet",
    "Wake",
    "check_before_planning",
    "check_success",
    "check_success_spec",
    "check_wait",
    "escalation",
    "interpret",
    "plan_revision",
    "refusal_observation",
    "same_json",
    "success_stop",
    "unverified_successes",
    "wake_of",
]

_OUTPUT = TypeAdapter(PlannerOutput)


@dataclass(frozen=True)
class Complete:
    answer: str
    citations: list[str]
    unverified: tuple[dict[str, Any], ...] = ()
    """Success conditions that hold on an ``unverified`` tool's word only
    (:func:`unverified_successes`): shown with the completion."""


@dataclass(frozen=True)
class Forward:
    """A (possibly malformed) tool proposal: the policy gate decides."""

    raw: Any
    proposal_id: str | None
    tool: str | None


@dataclass(frozen=True)
class Escalate:
    """The planner hands the run to a person (insufficient or conflicting evidence): the
    handoff's ``reason`` code and what the planner said (model text: shown as data)."""

    reason: StopReason
    said: str


def escalation(output: EscalateRequest) -> Escalate:
    """An ``escalate`` output's handoff: ``EVIDENCE_CONFLICTING`` when its sources disagree,
    else ``EVIDENCE_INSUFFICIENT``."""
    conflicting = output.evidence == "conflicting"
    reason = StopReason.EVIDENCE_CONFLICTING if conflicting else StopReason.EVIDENCE_INSUFFICIENT
    return Escalate(reason, output.reason)


@dataclass(frozen=True)
class Revise:
    """A plan to record as the run's next revision (:func:`plan_revision`)."""

    plan: Plan


@dataclass(frozen=True)
class Hold:
    """A wait to commit once its bounds are checked (:func:`check_wait`)."""

    wait: Wait


@dataclass(frozen=True)
class Refuse:
    """A planner output refused at its step (the planner sees ``code`` and ``reason`` and
    plans again)."""

    code: Rejection
    reason: str


#: Of a planner output that fails its shape, the kinds refused at the step (with the shape's
#: problem) rather than forwarded to the gate's parse layer.
_REFUSED_SHAPES = {"plan": Rejection.PLAN_INVALID, "wait": Rejection.WAIT_INVALID}


def _shape_problem(exc: ValidationError) -> str:
    """The first problem of a refused plan or wait, for the planner (no input echoed)."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"] if p not in ("plan", "wait"))
    return f"{where}: {first['msg']}" if where else str(first["msg"])


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


def interpret(
    raw: Any, observations: Sequence[ObservationView]
) -> Stop | Complete | Forward | Revise | Hold | Refuse | Escalate:
    """Turn one raw planner output into a decision. Tool proposals always go to the gate; a
    plan or a wait is decided at the step (a malformed one refused there)."""
    try:
        output = _OUTPUT.validate_python(raw)
    except ValidationError as exc:
        output = None
        kind = raw.get("kind") if isinstance(raw, dict) else None
        if isinstance(kind, str) and kind in _REFUSED_SHAPES:
            return Refuse(_REFUSED_SHAPES[kind], _shape_problem(exc))
    if isinstance(output, Plan):
        return Revise(output)
    if isinstance(output, Wait):
        return Hold(output)
    if isinstance(output, FinalAnswer):
        return validate_final(output, observations)
    if isinstance(output, NoAnswer):  # an honest abstention ends the run, not as a failure
        return Stop(
            RunStatus.COMPLETED,
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
    if isinstance(output, EscalateRequest):
        return escalation(output)
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


# --- a plan and a wait ------------------------------------------------------------------------

#: How often a run waiting for an event looks again (seconds; its ``max_seconds`` bounds it).
WAIT_POLL_S = 1.0


def plan_revision(
    plan: Plan, current: Mapping[str, Any] | None, *, step: int
) -> dict[str, Any] | Refuse:
    """The run's next plan (``revision`` one more than ``current``'s, the ``step`` it was made
    at), or :data:`~Rejection.PLAN_UNCHANGED` when it repeats ``current`` (same nodes, same
    open questions): a planner that only re-plans makes no progress."""
    body = plan.model_dump(mode="json", exclude={"kind"})
    if current is not None and all(current.get(k) == body[k] for k in ("nodes", "open_questions")):
        revision = current.get("revision")
        return Refuse(Rejection.PLAN_UNCHANGED, f"the plan repeats revision {revision}: act on it")
    revision = int((current or {}).get("revision") or 0) + 1
    return {**body, "revision": revision, "step": step}


def check_wait(
    wait: Wait, *, now: float, deadline_at: float, max_wait_s: float, step: int
) -> dict[str, Any] | Refuse:
    """The wait to store on the run (for its ``step``, the wait's own), or why it is
    refused: longer than ``max_wait_s`` (``WAIT_TOO_LONG``), or not over before the deadline,
    which keeps running while the run waits (``WAIT_PAST_DEADLINE``: refused rather than
    turned into the deadline's stop, so the planner may still answer or give up).
    ``wake_at``: when the run is planned again (an event wait: when it first looks);
    ``until_at``: when the wait ends at the latest."""
    longest = wait.longest_s
    if longest > max_wait_s:
        return Refuse(Rejection.WAIT_TOO_LONG, f"a wait lasts at most {max_wait_s:g} s")
    until_at = now + longest
    if until_at >= deadline_at:
        left = max(0.0, deadline_at - now)
        return Refuse(Rejection.WAIT_PAST_DEADLINE, f"the run's deadline is {left:.1f} s away")
    stored: dict[str, Any] = {"step": step, "since": now, "until_at": until_at}
    if wait.seconds is not None:
        return {**stored, "seconds": wait.seconds, "wake_at": until_at}
    first = now + min(WAIT_POLL_S, longest)
    return {**stored, "until": wait.until, "max_seconds": wait.max_seconds, "wake_at": first}


@dataclass(frozen=True)
class Wake:
    """What a planner message of a waiting run does: ``plan`` (no wait, or the wait is over:
    ``why`` says how), ``early`` (before the wake time, ``next_at``: sent again for then) or
    ``poll`` (an event wait whose event has not happened: look again at ``next_at``)."""

    action: str
    why: str | None = None
    next_at: float | None = None


def wake_of(
    waiting: Mapping[str, Any] | None,
    *,
    step: int,
    now: float,
    pending_effects: int,
    tolerance_s: float,
) -> Wake:
    """Whether a planner message for the run at ``step`` may plan now. A stored wait counts
    only while the run is at the wait's step (a fact recorded meanwhile, such as a cut call's
    late outcome, leaves it; any step of the run ends it)."""
    if not waiting or waiting.get("step") != step:
        return Wake("plan")
    wake_at = float(waiting["wake_at"])
    if now + tolerance_s < wake_at:
        return Wake("early", next_at=wake_at)
    if waiting.get("until") is None:
        return Wake("plan", why="seconds")
    if pending_effects == 0:
        return Wake("plan", why=str(waiting["until"]))
    until_at = float(waiting["until_at"])
    if now + tolerance_s >= until_at:
        return Wake("plan", why="max_seconds")
    return Wake("poll", next_at=min(now + WAIT_POLL_S, until_at))


# --- the spec's success conditions ------------------------------------------------------------

#: Why a condition does not hold (stable words, in the trace and the planner's observation).
NO_SUCCEEDED_CALL = "no_succeeded_call"
ARGUMENTS_DIFFER = "arguments_differ"
NO_ARTIFACT = "no_artifact"
UNVERIFIED_ONLY = "unverified_only"
"""The calls that match succeeded only on an ``unverified`` tool's word, and the condition
asks ``verified: true``."""


@dataclass(frozen=True)
class SucceededCall:
    """A tool call of the run whose outcome succeeded (or was found applied)."""

    tool: str
    tool_version: str
    arguments: Mapping[str, Any]
    """The arguments as the gate validated them (the command's)."""
    step: int
    verified: bool = True
    """False: the tool is an ``unverified`` write: its success is its own word only."""


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
    matching = [c for c in named if _matches(condition, c)]
    if not matching:
        return ARGUMENTS_DIFFER
    if condition.verified and not any(c.verified for c in matching):
        return UNVERIFIED_ONLY
    return None


def unverified_successes(
    success: SuccessSpec | None, facts: CompletionFacts
) -> list[dict[str, Any]]:
    """The ``tool_succeeded`` conditions that hold only on an ``unverified`` tool's word (no
    matching call of it was read back): they pass, and the completion says so (each with its
    index, tool and ``verified: false``)."""
    out: list[dict[str, Any]] = []
    for index, condition in enumerate(success.all_of if success is not None else ()):
        if not isinstance(condition, ToolSucceeded):
            continue
        matching = [
            c
            for c in facts.succeeded_calls
            if c.tool == condition.tool
            and condition.tool_version in (None, c.tool_version)
            and _matches(condition, c)
        ]
        if matching and not any(c.verified for c in matching):
            out.append({"index": index, "tool": condition.tool, "verified": False})
    return out


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
