"""A persistent injection (``handoff.after_untrusted_refusals``): when one more refused tool
proposal reaches the spec's limit, counted from the run's first untrusted read, the policy
stage hands the run to a person (``UNTRUSTED_INFLUENCE``) instead of planning again."""

from __future__ import annotations

from typing import Any

from warrant.ledger.proposal_facts import refused_under_untrusted_influence
from warrant.runner import policy
from warrant.runner.codes import RunStatus, StopReason

__all__ = ["influence", "persistent"]


def persistent(conn: Any, run_id: str, handoff: dict[str, Any] | None) -> bool:
    """One more refusal reaches the spec's ``handoff.after_untrusted_refusals`` (counted only
    when the spec asks: one read)."""
    limit = (handoff or {}).get("after_untrusted_refusals")
    return limit is not None and refused_under_untrusted_influence(conn, run_id) + 1 >= limit


def influence(decision: policy.Reject) -> policy.Halt:
    """The refusal that ends a persistent injection's run in a person's hands."""
    reason = StopReason.UNTRUSTED_INFLUENCE
    detail = {"last_code": decision.code}
    return policy.Halt(
        reason=reason,
        status=RunStatus.HANDOFF,
        fingerprint=decision.fingerprint,
        events=decision.events,
        detail=detail,
    )
