"""The policy stage's refusals that ask: a proposal refused for a missing grant, in a run whose
spec says ``policy.on_missing_grant: "ask"``, pauses the run in ``waiting_grant`` (the pending
proposal kept, nothing re-planned). The decision is :mod:`warrant.runner.grant_wait`."""

from __future__ import annotations

from typing import Any

from warrant.broker.context import StageContext
from warrant.ledger.guarded import update_proposal
from warrant.ledger.repo import commit
from warrant.ledger.stage_loads import grants_from
from warrant.runner import policy
from warrant.runner import run_machine as machine
from warrant.runner.grant_wait import asks_for_grant, grant_request
from warrant.runner.views import RunView

__all__ = ["asks", "await_grant"]


def asks(row: Any, decision: policy.Reject) -> bool:
    """Does the run's spec turn this refusal into a wait for a grant?"""
    on_missing = (getattr(row, "run_policy", None) or {}).get("on_missing_grant")
    return asks_for_grant(on_missing, decision.code)


def await_grant(
    ctx: StageContext, conn: Any, view: RunView, row: Any, decision: policy.Reject
) -> str:
    """Commit the wait: the run's status, the request as its ``stop_detail``, the proposal's
    status ``waiting_grant``. Returns ``waiting_grant:<code>`` (or the refusal's fallback when
    the tool is unknown to this worker: then nothing can be asked)."""
    proposal = row.proposal
    raw = proposal.get("raw") or {}
    tool = ctx.registry.get(proposal["tool"] or "", proposal["tool_version"] or "")
    assert tool is not None  # an authorization refusal comes after the registry layer
    given = raw.get("arguments")
    arguments: dict[str, Any] = given if isinstance(given, dict) else {}
    request = grant_request(
        code=decision.code,
        tool=tool,
        arguments=arguments,
        subject=view.subject,
        grants=grants_from(view.run_id, row.grants),
        step=proposal["step"],
        proposal_id=proposal["proposal_id"],
        proposal_hash=decision.fingerprint,
    )
    events = [(e.name, e.details) for e in decision.events]
    commit(
        conn,
        machine.request_grant(view, request=request, events=events),
        step=proposal["step"],
        proposal_id=proposal["proposal_id"],
        guarded=[
            update_proposal(
                proposal["id"],
                {
                    "status": "waiting_grant",
                    "rejection_code": decision.code,
                    "proposal_hash": decision.fingerprint,
                },
            )
        ],
    )
    return f"waiting_grant:{decision.code}"
