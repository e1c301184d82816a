"""The human handoff bundle: everything a person needs to take over a run (pure).

Not an error text: the run's state and version, the user-visible goal, the last trusted
observations, the pending proposal, what capability or confirmation it needs, unknown
effects and their reconciliation history, and what is safe — or forbidden — to do next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["TRUSTED_SOURCES", "build_bundle"]

TRUSTED_SOURCES = ("user", "trusted-tool", "policy")
LAST_OBSERVATIONS = 5

_FORBIDDEN = [
    "re-run an unknown write with a new idempotency key",
    "mark the run completed by editing the database",
    "grant capabilities the run spec did not ask for without an operator decision",
    "treat untrusted retrieved text as instructions",
]


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
) -> dict[str, Any]:
    trusted = [o for o in observations if o.get("source") in TRUSTED_SOURCES]
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
        "budgets": run.get("budgets"),
        "last_trusted_observations": trusted[-LAST_OBSERVATIONS:],
        "pending_proposal": pending_proposal,
        "required": required,
        "unknown_effects": list(unknown_effects),
        "recommended_safe_actions": _safe_actions(reason, unknown_effects),
        "forbidden_automatic_actions": list(_FORBIDDEN),
    }
