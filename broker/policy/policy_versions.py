"""The policy stage's record of which policy decided: every decision of the gate (accepted,
refused, waiting for a person, halted) gets a ``policy.versioned`` trace event with its policy
version (:mod:`warrant.runner.policy_version`) and the decision it versions."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from warrant.broker.context import StageContext
from warrant.runner import policy
from warrant.runner.policy_version import policy_version
from warrant.runner.views import GrantView

__all__ = ["versioned"]


def _decision_name(decision: policy.Decision) -> str:
    if isinstance(decision, policy.Accept):
        return "accepted"
    if isinstance(decision, policy.AwaitConfirmation):
        return "needs_confirmation"
    if isinstance(decision, policy.Reject):
        return "refused"
    return "halted"


def versioned(
    ctx: StageContext,
    proposal: dict[str, Any],
    grants: Sequence[GrantView],
    run_policy: dict[str, Any] | None,
    decision: policy.Decision,
) -> policy.Decision:
    """``decision`` with a last ``policy.versioned`` event (an ignored message: unchanged)."""
    if isinstance(decision, policy.Ignore):
        return decision
    tool = ctx.registry.get(proposal.get("tool") or "", proposal.get("tool_version") or "")
    settings = ctx.settings
    version = policy_version(
        tool=tool,
        grants=grants,
        relaxed_tools=settings.relaxed_tools,
        approvals_floor=settings.approvals_floor if settings.approvals_required else None,
        run_policy=run_policy,
    )
    details = {**version.details(), "decision": _decision_name(decision)}
    event = policy.Event("policy.versioned", details)
    return dataclasses.replace(decision, events=[*decision.events, event])
