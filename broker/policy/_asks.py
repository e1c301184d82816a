"""What the policy stage writes when a person must act before a proposal may run: a request
to confirm it (bound to its hash; with what the tool's service says of its resources and the
state the person approves), or, for a refusal the run spec turns into a question, a request
for a grant (``waiting_grant``)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from warrant.broker.context import StageContext
from warrant.broker.tool.preconditions import precondition_shown
from warrant.ledger.guarded import update_proposal
from warrant.ledger.repo import commit
from warrant.ledger.stage_loads import PolicyLoad
from warrant.runner import policy
from warrant.runner import run_machine as machine
from warrant.runner.confirmation_rules import approvals_required, request_clock
from warrant.runner.permission_wait import asks_for_grant, grant_request
from warrant.runner.views import RunView

__all__ = [
    "ask_person",
    "asks",
    "await_grant",
    "call_request",
    "described",
    "shown_to_person",
    "trace_events",
]

log = logging.getLogger("warrant.policy")


def trace_events(decision_events: list[policy.Event]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, e.details) for e in decision_events]


def ask_person(
    ctx: StageContext,
    conn: Any,
    view: RunView,
    proposal: dict[str, Any],
    decision: policy.AwaitConfirmation,
    now: float,
    *,
    parallel: dict[str, Any] | None = None,
) -> str:
    """The run waits for a person's decision on ``decision``'s proposal (already
    :func:`shown_to_person`): its request (:func:`call_request`) with its expiry. ``parallel``:
    the call is the first of a parallel step's calls that need a person; the set
    (``parallel.calls``) carries each one's own request, and the run waits for a decision on
    every one of them."""
    request = call_request(ctx, decision)
    if parallel is not None:
        request["parallel"] = parallel
    step = proposal["step"]
    request |= request_clock(view.budgets, deadline_at=view.deadline_at, now=now)
    request["expires_at_step"] = step + view.budgets.confirmation_steps
    change = machine.request_confirmation(
        view,
        proposal_hash=decision.proposal_hash,
        tool=decision.tool.name,
        events=trace_events(decision.events),
    )
    commit(
        conn,
        change,
        step=step,
        proposal_id=proposal["proposal_id"],
        guarded=[
            update_proposal(
                proposal["id"],
                {
                    "status": "waiting_confirmation",
                    "tool": decision.tool.name,  # a parallel step's: its first call asked about
                    "tool_version": decision.tool.version,
                    "fingerprint": decision.proposal_hash,
                    "proposal_hash": decision.proposal_hash,
                    "arguments": decision.arguments,
                    "confirmation_request": request,
                    "provenance": decision.provenance,
                },
            )
        ],
    )
    return "waiting"


def call_request(ctx: StageContext, decision: policy.AwaitConfirmation) -> dict[str, Any]:
    """What a person is asked about one call: what runs (:meth:`~warrant.runner.gate.
    AwaitConfirmation.request`), how many distinct people must approve it (the tool's rule, or
    the deployment's floor if higher), who has, and whether whoever started the run may."""
    floor = ctx.settings.approvals_floor.get(decision.tool.name, 1)
    required = approvals_required(decision.tool, decision.arguments)
    return {
        **decision.request(),
        "approvals_required": max(required, floor),
        "approved_by": [],
        "self_approval_allowed": decision.tool.self_approval_allowed,
    }


def shown_to_person(
    ctx: StageContext, decision: policy.AwaitConfirmation, view: RunView
) -> policy.AwaitConfirmation:
    """``decision`` with what its tool's service says of its resources and the state the
    person approves."""
    said = described(ctx, decision, view.subject)
    state = precondition_shown(ctx, decision, view)
    return dataclasses.replace(decision, described=said, precondition=state)


# -- What a call's resources refer to, for the person asked to confirm it: the tool's
# ``describe_resources(args, deps, subject)`` hook (``Tool.describe_resources``), asked by the
# policy stage when it requests a confirmation. Its answer is the service's words, not
# the program's: bounded (:data:`MAX_FIELDS` entries of :data:`MAX_CHARS` characters, control
# characters dropped), and a hook that fails says so instead of holding the request back.

MAX_FIELDS = 20
MAX_CHARS = 200
UNAVAILABLE = "(the service could not say)"


def _clean(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return "".join(ch for ch in text if ch.isprintable())[:MAX_CHARS]


def described(
    ctx: StageContext, decision: policy.AwaitConfirmation, subject: str
) -> dict[str, str]:
    """The tool's description of the call's resources ({} when it has no hook)."""
    tool = decision.tool
    if tool.describe_resources is None:
        return {}
    try:
        args = tool.parse_input(decision.arguments)
        said = tool.describe_resources(args, ctx.deps_for(tool), subject)
        items = list(dict(said).items())[:MAX_FIELDS]
    except Exception:  # the request goes to the person all the same
        log.warning("describe_resources failed for %s", tool.name, exc_info=True)
        return {"*": UNAVAILABLE}
    return {_clean(k)[:64]: _clean(v) for k, v in items}


# -- The policy stage's refusals that ask: a proposal refused for a missing grant, in a run whose
# spec says ``policy.on_missing_grant: "ask"``, pauses the run in ``waiting_grant`` (the pending
# proposal kept, nothing re-planned). The decision is :mod:`warrant.runner.permission_wait`.


def asks(row: Any, decision: policy.Reject) -> bool:
    """Does the run's spec turn this refusal into a wait for a grant?"""
    on_missing = (getattr(row, "run_policy", None) or {}).get("on_missing_grant")
    return asks_for_grant(on_missing, decision.code)


def await_grant(
    ctx: StageContext,
    conn: Any,
    view: RunView,
    load: PolicyLoad,
    decision: policy.Reject,
    *,
    call: tuple[int, dict[str, Any]] | None = None,
) -> str:
    """Commit the wait: the run's status, the request as its ``stop_detail``, the proposal's
    status ``waiting_grant``. ``call``: the parallel step's call (its number and the call)
    the grant is for; the whole set waits, and the gate looks at it again once granted.
    Returns ``waiting_grant:<code>``."""
    proposal = load.row.proposal
    raw = (proposal.get("raw") or {}) if call is None else call[1]
    named = proposal if call is None else raw
    tool = ctx.registry.get(named.get("tool") or "", named.get("tool_version") or "")
    assert tool is not None  # an authorization refusal comes after the registry layer
    given = raw.get("arguments")
    arguments: dict[str, Any] = given if isinstance(given, dict) else {}
    request = grant_request(
        code=decision.code,
        tool=tool,
        arguments=arguments,
        subject=view.subject,
        grants=load.grants,
        step=proposal["step"],
        proposal_id=proposal["proposal_id"],
        proposal_hash=decision.fingerprint,
    )
    if call is not None:
        request["branch"] = call[0]
    commit(
        conn,
        machine.request_grant(view, request=request, events=trace_events(decision.events)),
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
