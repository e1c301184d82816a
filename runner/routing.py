"""Routing (001 §2.2): a classifier names a label, the program maps it to a fixed branch.

A run whose planner kind is ``router`` (:class:`~warrant.runner.spec.RouterPlannerSpec`) asks its
classifier once for ``{"label": ..., "confidence": 0..1}``. The decision is the program's:

* a label of the spec's finite set, given with at least ``confidence_floor``, starts that
  label's fixed branch: a ``delegate`` call (so the branch's grants and budgets narrow the
  router run's like any sub-run's, and the gate checks them);
* ``unknown``, a label not in the set, an unreadable reply, or a label under the floor never
  falls into the nearest branch: it goes to the ``fallback``, a person's classification by
  default (the run asks, ``needs_input``; the answer is the label), or a read-only branch;
* when the branch's sub-run ends, its answer is the router run's final answer, citing the
  branch's observation (or an honest ``no_answer`` when the branch ended without one).

Each route is recorded with the ``delegate`` call (``route``: label, confidence, who decided,
whether the branch is high-risk, an evaluation run's expected label), on the branch's run row:
``/metrics`` counts routes, fallbacks and misroutes, misroutes into high-risk branches on their
own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from warrant.runner.delegation import DELEGATE_TOOL
from warrant.runner.spec import RouterPlannerSpec

__all__ = [
    "AskPerson",
    "Routed",
    "branch_problem",
    "by_person",
    "classify",
    "fallback_problem",
    "final_of",
    "instruction",
    "output_of",
]


@dataclass(frozen=True, kw_only=True)
class Routed:
    label: str
    confidence: float | None
    by: str
    """``model`` (the classifier, above the floor), ``person`` or ``fallback``."""
    proposed: str | None = None
    """What the classifier said, when it was not followed."""
    reason: str | None = None
    """Why it was not: ``unknown``, ``not_a_label``, ``low_confidence``, ``unreadable``."""


@dataclass(frozen=True, kw_only=True)
class AskPerson:
    reason: str
    proposed: str | None
    confidence: float | None


def classify(spec: RouterPlannerSpec, raw: Any) -> Routed | AskPerson:
    """The program's decision on the classifier's reply ``raw`` (untrusted)."""
    label, confidence = _read(raw)
    reason = None
    if label is None:
        reason = "unreadable"
    elif label == "unknown":
        reason = "unknown"
    elif label not in spec.routes:
        reason = "not_a_label"
    elif confidence is None or confidence < spec.confidence_floor:
        reason = "low_confidence"
    if reason is None and label is not None:
        return Routed(label=label, confidence=confidence, by="model")
    if spec.fallback == "person":
        return AskPerson(reason=reason or "unreadable", proposed=label, confidence=confidence)
    return Routed(
        label=spec.fallback, confidence=confidence, by="fallback", proposed=label, reason=reason
    )


def by_person(spec: RouterPlannerSpec, answer: str) -> Routed | AskPerson:
    """A person's answer to the router's question: one of the labels, or asked again."""
    text = _answer_text(answer).strip().strip("`'\".").lower()
    if text in spec.routes:
        return Routed(label=text, confidence=None, by="person")
    return AskPerson(reason="not_a_label", proposed=text[:64] or None, confidence=None)


def output_of(
    spec: RouterPlannerSpec, decision: Routed | AskPerson, *, goal: str, step: int
) -> dict[str, Any]:
    """The planner output the decision is: the branch's ``delegate`` call, or the question."""
    labels = ", ".join(sorted(spec.routes))
    if isinstance(decision, AskPerson):
        said = "" if decision.proposed is None else f" (the classifier said {decision.proposed!r})"
        return {"kind": "clarify", "question": f"Which of these fits the request: {labels}?{said}"}
    route = spec.routes[decision.label]
    record = {
        "label": decision.label,
        "confidence": decision.confidence,
        "by": decision.by,
        "high_risk": route.high_risk,
        "expected": spec.expected_label,
        "proposed": decision.proposed,
        "reason": decision.reason,
    }
    return {
        "kind": "tool",
        "proposal_id": f"route-{step}",
        "tool": DELEGATE_TOOL,
        "tool_version": "1",
        "arguments": {
            "goal": goal,
            "planner": route.planner.model_dump(mode="json"),
            "grants": [g.model_dump(mode="json", exclude_none=True) for g in route.grants],
            "budgets": dict(route.budgets),
            "route": record,
        },
        "reason_summary": f"routed to {decision.label} ({decision.by})",
    }


def final_of(item_id: str, content: str) -> dict[str, Any]:
    """The router run's end once its branch has ended: the branch's answer, citing its
    observation, or an honest ``no_answer`` (the router run completes abstaining,
    ``NO_ANSWER``; a branch that failed stays failed on its own run, counted there once)."""
    output = _json_in(content).get("output") or {}
    answer = output.get("answer") if isinstance(output, dict) else None
    if isinstance(answer, str) and answer.strip():
        return {"kind": "final", "answer": answer, "citations": [item_id]}
    status = output.get("stop_reason") if isinstance(output, dict) else None
    return {"kind": "no_answer", "reason": f"the branch ended without an answer ({status})"}


def instruction(spec: RouterPlannerSpec) -> str:
    """What a model classifier is asked (its view's goal is this, then the request)."""
    labels = ", ".join(sorted(spec.routes))
    return (
        f"Classify the request below into exactly one of these labels: {labels}; or unknown. "
        'Reply with a final answer whose text is only JSON: {"label": "<label>", '
        '"confidence": <0..1>}. Do not call any tool.\n\nRequest: '
    )


def branch_problem(planner: Any, request: Any) -> str | None:
    """Why a ``delegate`` call is not the fixed branch its ``route`` names (checked at the
    spawn against the parent run's stored planner spec), or ``None``. A call from a run that
    is no router may carry no ``route``."""
    route = getattr(request, "route", None)
    is_router = isinstance(planner, dict) and planner.get("kind") == "router"
    if route is None:
        return "a router run starts only its routes' branches" if is_router else None
    if not is_router:
        return "only a router run's call may carry a route"
    branch = (planner.get("routes") or {}).get(route.get("label"))
    if branch is None:
        return f"no route {route.get('label')!r}"
    asked = {
        "planner": request.planner.model_dump(mode="json"),
        "grants": [g.model_dump(mode="json", exclude_none=True) for g in request.grants],
        "budgets": dict(request.budgets),
    }
    fixed = RouterPlannerSpec.model_validate(planner).routes[route["label"]]
    wanted = {
        "planner": fixed.planner.model_dump(mode="json"),
        "grants": [g.model_dump(mode="json", exclude_none=True) for g in fixed.grants],
        "budgets": dict(fixed.budgets),
    }
    return None if asked == wanted else f"not the fixed branch of route {route['label']!r}"


def fallback_problem(spec: RouterPlannerSpec, tools: Iterable[Any]) -> str | None:
    """Why the spec's fallback branch could write (a low-confidence request must never reach
    a write tool), or ``None``: every tool that any of its grants' capabilities opens only
    reads (``side_effect`` ``read``), and it may start no sub-run."""
    if spec.fallback == "person":
        return None
    capabilities = {g.capability for g in spec.routes[spec.fallback].grants}
    writers = sorted(
        f"{t.name}@{t.version}"
        for t in tools
        if capabilities & set(t.capabilities) and str(t.side_effect) != "read"
    )
    if writers:
        return f"fallback branch {spec.fallback!r} could write: {', '.join(writers)}"
    return None


def _read(raw: Any) -> tuple[str | None, float | None]:
    if isinstance(raw, dict) and raw.get("kind") == "final" and isinstance(raw.get("answer"), str):
        raw = raw["answer"]  # a model classifier's final answer carries the JSON
    if isinstance(raw, str):
        raw = _json_in(raw)
    if not isinstance(raw, dict) or not isinstance(raw.get("label"), str):
        return None, None
    confidence = raw.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        return raw["label"].strip().lower(), None
    return raw["label"].strip().lower(), float(confidence)


def _answer_text(content: str) -> str:
    parsed = _json_in(content)
    answer = parsed.get("answer")
    return answer if isinstance(answer, str) else content


def _json_in(text: str) -> dict[str, Any]:
    """The JSON object inside a rendered observation (untrusted delimiters around it)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
