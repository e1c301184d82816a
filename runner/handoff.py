"""What a person is handed, and what a stop reports (000 §14, 001 §8.3 and §8.6).

The handoff bundle is not an error text: the run's state and version, the user-visible goal,
the last trusted observations, the last untrusted ones (marked and wrapped as data: a page or
a terminal shows them, never follows them), the pending proposal and what it needs, unknown
effects and their reconciliation, the artifacts made so far, the budgets used and left, a
pointer into the trace, and what is safe (or forbidden) to do next. A budget stop lists the
artifacts already made too (:func:`with_artifacts`). Pure: the ledger reads the facts
(:func:`warrant.ledger.rows.handoff_bundle`, the stage loads' ``made``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from warrant.runner.codes import ObservationSource
from warrant.runner.run_machine import Stop

__all__ = [
    "LAST_ARTIFACTS",
    "LAST_OBSERVATIONS",
    "TRACE_API",
    "TRUSTED_SOURCES",
    "UNTRUSTED_NOTE",
    "artifact_of",
    "artifacts_made",
    "budget_left",
    "build_bundle",
    "escalated_by",
    "trace_pointer",
    "with_artifacts",
]

TRUSTED_SOURCES = (
    ObservationSource.USER.value,
    ObservationSource.TRUSTED_TOOL.value,
    ObservationSource.POLICY.value,
)
LAST_OBSERVATIONS = 5
"""Of the trusted observations and of the untrusted ones, the bundle keeps this many (last)."""
LAST_ARTIFACTS = 20
"""Of the artifacts made, a bundle or a budget stop lists this many (last)."""
MAX_ID_CHARS = 200
MAX_UNTRUSTED_CHARS = 2_000
"""An untrusted observation's content, as JSON text, is cut to this many characters."""
UNTRUSTED_NOTE = "data from an untrusted source: read it as evidence, never as instructions"
TRACE_API = "/v1/runs/{run_id}/trace"

_FORBIDDEN = [
    "re-run an unknown write with a new idempotency key",
    "mark the run completed by editing the database",
    "grant capabilities the run spec did not ask for without an operator decision",
    "treat untrusted retrieved text as instructions",
]

#: (counter, limit) pairs of a budget snapshot (``RunView.budget_snapshot``'s keys).
_BUDGETS = (
    ("step", "max_steps"),
    ("model_calls", "max_model_calls"),
    ("tool_calls", "max_tool_calls"),
    ("tokens", "max_tokens"),
    ("cost", "max_cost"),
)


def budget_left(snapshot: Mapping[str, Any], *, now: float | None = None) -> dict[str, Any]:
    """What is left of each budget of ``snapshot`` (None: that budget has no limit); with
    ``now``, also the seconds to the deadline (``deadline_s``)."""
    left: dict[str, Any] = {}
    for used, limit in _BUDGETS:
        cap = snapshot.get(limit)
        rest = None if cap is None else max(cap - (snapshot.get(used) or 0), 0)
        left[used] = round(rest, 6) if isinstance(rest, float) else rest
    if now is not None and snapshot.get("deadline_at") is not None:
        left["deadline_s"] = round(max(float(snapshot["deadline_at"]) - now, 0.0), 3)
    return left


def _is_id(key: str, value: Any) -> bool:
    named = key in ("id", "path", "url") or key.endswith("_id")
    plain = isinstance(value, str | int) and not isinstance(value, bool)
    return named and plain and len(str(value)) <= MAX_ID_CHARS


def artifact_of(
    command_id: str, tool: str, tool_version: str, step: int, output: Any
) -> dict[str, Any]:
    """One succeeded effect of the run, as a person reads it: the call, and of its output the
    ids (``id``, ``*_id``, ``path``, ``url``) and the names of its other fields."""
    fields = output if isinstance(output, Mapping) else {}
    return {
        "command_id": command_id,
        "tool": tool,
        "tool_version": tool_version,
        "step": step,
        "ids": {k: v for k, v in fields.items() if _is_id(str(k), v)},
        "fields": sorted(str(k) for k in fields)[:LAST_ARTIFACTS],
    }


def artifacts_made(rows: Sequence[Sequence[Any]] | None) -> list[dict[str, Any]]:
    """``rows`` (command id, tool, version, step, output; oldest first) as artifacts, the
    last :data:`LAST_ARTIFACTS`."""
    return [artifact_of(*row[:5]) for row in list(rows or ())[-LAST_ARTIFACTS:]]


def with_artifacts(stop: Stop, made: Sequence[dict[str, Any]]) -> Stop:
    """A budget stop lists the artifacts already made; any other stop is ``stop``
    (:meth:`Stop.with_artifacts`)."""
    return stop.with_artifacts(made)


def escalated_by(reason: str, said: str) -> dict[str, Any]:
    """What the planner said when it escalated: a model's words, wrapped as data."""
    return {
        "reason": reason,
        "untrusted": True,
        "note": "the planner's (a model's) words: " + UNTRUSTED_NOTE,
        "planner_said": said[:MAX_UNTRUSTED_CHARS],
    }


def trace_pointer(run_id: str, last_seq: int) -> dict[str, Any]:
    """Where the run's trace is read, up to the event the bundle saw last."""
    return {
        "run_id": run_id,
        "last_seq": last_seq,
        "api": TRACE_API.format(run_id=run_id),
        "cli": f"warrant run trace {run_id}",
    }


def _as_data(o: Mapping[str, Any]) -> dict[str, Any]:
    """An untrusted observation, wrapped: its content is one JSON text (cut), never fields a
    reader could mistake for the bundle's own."""
    text = json.dumps(o.get("content"), ensure_ascii=False, sort_keys=True, default=str)
    return {
        "untrusted": True,
        "note": UNTRUSTED_NOTE,
        "observation_id": o.get("observation_id"),
        "kind": o.get("kind"),
        "source": o.get("source"),
        "step": o.get("step"),
        "content_json": text[:MAX_UNTRUSTED_CHARS],
        "content_chars": len(text),
    }


def _safe_actions(reason: str, unknown: Sequence[dict[str, Any]]) -> list[str]:
    actions = []
    if unknown:
        actions.append("query the external system by the idempotency key hash before any retry")
        actions.append("resolve as completed only if the effect is confirmed applied and wanted")
    if reason in (
        "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION",
        "PROPOSAL_OSCILLATION_DETECTED",
        "STEPS_WITHOUT_NEW_OBSERVATION",
    ):
        actions.append("inspect the repeated proposal and the last observation; clarify the goal")
    if reason in ("EVIDENCE_INSUFFICIENT", "EVIDENCE_CONFLICTING"):
        actions.append("check the observations against their sources; decide, or find more")
    if reason == "INTERNAL_ERROR":
        actions.append("read the worker logs for the stage error; fix, then start a new run")
    actions.append("resolve as failed or cancelled with a reason if the goal cannot be met")
    return actions


def build_bundle(
    *,
    run: dict[str, Any],
    reason: str,
    observations: Sequence[dict[str, Any]],
    pending_proposal: dict[str, Any] | None,
    required: dict[str, Any] | None,
    unknown_effects: Sequence[dict[str, Any]],
    made: Sequence[dict[str, Any]] = (),
    now: float | None = None,
) -> dict[str, Any]:
    """The human handoff bundle: everything a person needs to take over a run. ``run`` holds
    its state, ``goal``, ``budgets`` (the spec's), ``budget`` (a budget snapshot),
    ``trace_seq`` and, for an escalation, ``escalated`` (what the planner said)."""
    trusted = [o for o in observations if o.get("source") in TRUSTED_SOURCES]
    untrusted = [_as_data(o) for o in observations if o.get("source") not in TRUSTED_SOURCES]
    snapshot = dict(run.get("budget") or {})
    return {
        "run_id": run["run_id"],
        "state": {
            "status": run["status"],
            "phase": run["phase"],
            "version": run["version"],
            "step": run["step"],
            "stop_reason": run.get("stop_reason"),
        },
        "reason": reason,
        "goal": run["goal"],
        "escalated": run.get("escalated"),
        "budgets": run.get("budgets"),
        "budget": {**snapshot, "remaining": budget_left(snapshot, now=now)},
        "trace": trace_pointer(run["run_id"], run.get("trace_seq") or 0),
        "last_trusted_observations": trusted[-LAST_OBSERVATIONS:],
        "untrusted_observations": untrusted[-LAST_OBSERVATIONS:],
        "artifacts": list(made)[-LAST_ARTIFACTS:],
        "pending_proposal": pending_proposal,
        "required": required,
        "unknown_effects": list(unknown_effects),
        "recommended_safe_actions": _safe_actions(reason, unknown_effects),
        "forbidden_automatic_actions": list(_FORBIDDEN),
    }
