"""What people do to runs over HTTP: confirm or decline a pending proposal, answer a question,
cancel, grant a capability, pre-approve a proposal, resolve a handoff, revoke a memory record,
disable or enable a tool, approve the deployment policy.

Who acted (``by``, ``granted_by``, ``approved_by``) is always the token's
:attr:`~warrant.runner.authz.Identity.label`, never a field of the body; the role check of
:func:`~warrant.runner.server.http.auth.requires` replaces ``WARRANT_OPERATOR_TOKEN`` (the
configured token is passed through to the client)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request

from warrant.runner.authz import Action, Identity
from warrant.runner.confirmation_rules import approvals_pending, waiting_for
from warrant.runner.server.http.auth import Reader, check_own_run, deps, origin, requires
from warrant.runner.server.http.errors import ERROR_RESPONSES
from warrant.runner.server.http.models import (
    AnswerIn,
    CancelIn,
    CorrectionIn,
    CorrectionOut,
    DecisionIn,
    DecisionOut,
    DecisionsIn,
    DecisionsOut,
    GrantIn,
    GrantOut,
    HandoffPage,
    MemoryRecordsOut,
    MemoryRevokedOut,
    PolicyApprovalIn,
    PolicyApprovalOut,
    PolicyDiffIn,
    PolicyDiffOut,
    PolicyOut,
    PreApprovalIn,
    PreApprovalOut,
    ReplayIn,
    ReplayOut,
    ResolveIn,
    RunOut,
    ToolSwitchIn,
    ToolSwitchOut,
)
from warrant.runner.server.http.runs import RunId, run_out

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["actions"], responses=ERROR_RESPONSES)

HandoffId = Annotated[
    str,
    Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="The handoff's id (or its run's)."),
]
RecordId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The memory record's id.")]


Confirmer = Annotated[Identity, Depends(requires(Action.CONFIRM))]
Answerer = Annotated[Identity, Depends(requires(Action.ANSWER))]
Canceller = Annotated[Identity, Depends(requires(Action.CANCEL))]
Granter = Annotated[Identity, Depends(requires(Action.GRANT))]
PreApprover = Annotated[Identity, Depends(requires(Action.PRE_APPROVE))]
Resolver = Annotated[Identity, Depends(requires(Action.RESOLVE_HANDOFF))]
MemoryRevoker = Annotated[Identity, Depends(requires(Action.REVOKE_MEMORY))]
ToolSwitcher = Annotated[Identity, Depends(requires(Action.SWITCH_TOOLS))]
PolicyApprover = Annotated[Identity, Depends(requires(Action.APPROVE_POLICY))]


@router.post(
    "/runs/{run_id}/confirm",
    response_model=DecisionOut,
    response_model_exclude_none=True,
    summary="Confirm",
)
def confirm(request: Request, run_id: RunId, body: DecisionIn, identity: Confirmer) -> DecisionOut:
    """Approve exactly the pending proposal (bound to its hash); the run goes on once as many
    distinct people approved as the tool needs (``waiting_for_more`` until then). Whoever
    started the run may not (``OWN_RUN_APPROVAL_FORBIDDEN``) unless the tool or deployment
    allows it; the same person twice: ``ALREADY_APPROVED``."""
    client = deps(request).client
    version = client.confirm(
        run_id,
        proposal_hash=body.proposal_hash,
        by=identity.label,
        origin=origin(request, "api"),
        precondition=body.precondition,
    )
    more = approvals_pending(client.get_run(run_id).confirmation_request, body.proposal_hash)
    waiting = {"waiting_for_more": True, **more} if more is not None else {}
    return DecisionOut(run_id=run_id, decision="approved", version=version, **waiting)


@router.post(
    "/runs/{run_id}/decline",
    response_model=DecisionOut,
    response_model_exclude_none=True,
    summary="Decline",
)
def decline(request: Request, run_id: RunId, body: DecisionIn, identity: Confirmer) -> DecisionOut:
    """Refuse the pending proposal; the planner sees a decline observation."""
    client = deps(request).client
    version = client.decline(
        run_id, proposal_hash=body.proposal_hash, by=identity.label, origin=origin(request, "api")
    )
    return DecisionOut(run_id=run_id, decision="declined", version=version)


@router.post("/runs/{run_id}/correct", response_model=CorrectionOut, summary="Correct a parameter")
def correct(
    request: Request, run_id: RunId, body: CorrectionIn, identity: Confirmer
) -> CorrectionOut:
    """Edit the pending proposal instead of approving it as it is: its arguments with
    ``changes`` become a new proposal with its own hash, gated again from the start (schema,
    grants, scopes, provenance: your values count as the user's); the original is declined and
    never runs. The edit is your approval of the new hash when one approver suffices (and
    the tool shows no state first), else the new proposal waits for its own confirmation.
    Traced ``proposal.corrected``. Whoever started the run may not
    (``OWN_RUN_APPROVAL_FORBIDDEN``) unless the tool or deployment allows it."""
    corrected = deps(request).client.correct(
        run_id,
        proposal_hash=body.proposal_hash,
        changes=body.changes,
        by=identity.label,
        reason=body.reason,
        origin=origin(request, "api"),
    )
    return CorrectionOut(**corrected.to_dict())


@router.post(
    "/runs/{run_id}/decisions",
    response_model=DecisionsOut,
    summary="Decide several calls",
)
def decide(request: Request, run_id: RunId, body: DecisionsIn, identity: Confirmer) -> DecisionsOut:
    """Approve and decline in one action, each by its hash: the pending proposal, or the
    calls of its parallel step that need a person (``confirmation_request.parallel.calls``).
    The run goes back to the gate once every call of the set is decided; ``waiting_for``
    lists those that still wait (for a decision, or for more approvals)."""
    client = deps(request).client
    version = client.decide(
        run_id,
        approve=body.approve,
        decline=body.decline,
        seen=body.seen,
        by=identity.label,
        origin=origin(request, "api"),
    )
    return DecisionsOut(
        run_id=run_id,
        version=version,
        waiting_for=waiting_for(client.get_run(run_id).confirmation_request),
    )


@router.post("/runs/{run_id}/answer", response_model=RunOut, summary="Answer a question")
def answer(request: Request, run_id: RunId, body: AnswerIn, identity: Answerer) -> RunOut:
    """Answer the question a ``needs_input`` run asked; the planner is asked again."""
    return run_out(deps(request).client.answer(run_id, text=body.text, by=identity.label))


@router.post("/runs/{run_id}/cancel", response_model=RunOut, summary="Cancel")
def cancel(
    request: Request,
    run_id: RunId,
    identity: Canceller,
    body: Annotated[CancelIn | None, Body()] = None,
) -> RunOut:
    """No new work for the run; a running tool is interrupted. A producer may cancel only
    the runs it started (``NOT_YOUR_RUN``); an operator any run."""
    client = deps(request).client
    check_own_run(client, identity, run_id)
    return run_out(client.cancel(run_id, by=identity.label, reason=body.reason if body else ""))


@router.post("/runs/{run_id}/grants", status_code=201, response_model=GrantOut, summary="Grant")
def add_grant(request: Request, run_id: RunId, body: GrantIn, identity: Granter) -> GrantOut:
    """Grant a capability to the run (scope, expiry step and uses as in a run spec)."""
    d = deps(request)
    grant_id = d.client.add_grant(
        run_id,
        capability=body.capability,
        resource_scope=body.resource_scope,
        expires_at_step=body.expires_at_step,
        max_uses=body.max_uses,
        destinations_from=body.destinations_from,
        granted_by=identity.label,
        operator_token=d.operator_token,
        expires_at=body.expires_at,
        expires_in_s=body.expires_in_s,
        widen=body.widen,
        constraints=body.constraints,
    )
    return GrantOut(run_id=run_id, grant_id=grant_id)


@router.post(
    "/runs/{run_id}/pre-approvals",
    status_code=201,
    response_model=PreApprovalOut,
    summary="Pre-approve a proposal",
)
def pre_approve(
    request: Request, run_id: RunId, body: PreApprovalIn, identity: PreApprover
) -> PreApprovalOut:
    """Approve one exact proposal ahead of time: the gate takes a matching proposal of this
    run as confirmed, once."""
    d = deps(request)
    pre_id = d.client.pre_approve(
        run_id,
        tool=body.tool,
        tool_version=body.tool_version,
        arguments=body.arguments,
        approved_by=identity.label,
        operator_token=d.operator_token,
    )
    return PreApprovalOut(run_id=run_id, pre_approval_id=pre_id)


@router.get("/handoffs", response_model=HandoffPage, summary="Handoffs")
def list_handoffs(
    request: Request,
    identity: Reader,
    open_only: Annotated[bool, Query(description="Only those not resolved yet.")] = True,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> HandoffPage:
    """The runs handed to a person, newest first, each with its bundle."""
    found = deps(request).client.handoffs(open_only=open_only, limit=limit)
    return HandoffPage(handoffs=found)


@router.get("/handoffs/{handoff_id}", response_model=dict[str, Any], summary="One handoff")
def get_handoff(request: Request, handoff_id: HandoffId, identity: Reader) -> dict[str, Any]:
    """The handoff (given a run's id: its newest), with the whole bundle: state, goal,
    evidence, pending proposal, unknown effects, recommended and forbidden actions."""
    found: dict[str, Any] = deps(request).client.handoff(handoff_id)
    return found


@router.post("/handoffs/{handoff_id}/resolve", response_model=RunOut, summary="Resolve")
def resolve_handoff(
    request: Request,
    handoff_id: HandoffId,
    body: ResolveIn,
    identity: Resolver,
) -> RunOut:
    """A person ends a handed-off run: completed, failed or cancelled, with the reason."""
    client = deps(request).client
    return run_out(
        client.resolve_handoff(
            handoff_id, outcome=body.outcome, by=identity.label, reason=body.reason
        )
    )


@router.get("/memory", response_model=MemoryRecordsOut, summary="A subject's memory records")
def memory_records(
    request: Request,
    identity: MemoryRevoker,
    subject: Annotated[str, Query(min_length=1, max_length=200, pattern=r"^[^\x00]*$")],
    include_inactive: Annotated[bool, Query(description="Revoked and expired too.")] = False,
) -> MemoryRecordsOut:
    """The long-term memory of ``subject`` (what planners are shown of it), for the role that
    may revoke records."""
    found = deps(request).client.memory_records(subject, include_inactive=include_inactive)
    return MemoryRecordsOut(subject=subject, records=found)


@router.delete(
    "/memory/{record_id}", response_model=MemoryRevokedOut, summary="Revoke a memory record"
)
def revoke_memory(
    request: Request, record_id: RecordId, identity: MemoryRevoker
) -> MemoryRevokedOut:
    """The record is never returned to a planner again (kept, marked revoked)."""
    out = deps(request).client.revoke_memory(record_id, by=identity.label)
    return MemoryRevokedOut.model_validate(out)


@router.post("/tools/disable", response_model=ToolSwitchOut, summary="Disable a tool")
def disable_tool(request: Request, body: ToolSwitchIn, identity: ToolSwitcher) -> ToolSwitchOut:
    """The kill switch: every call of the tool is refused ``TOOL_DISABLED`` from the gate's
    next decision, and a command issued for it that has not started from its next claim."""
    out = deps(request).client.disable_tool(body.tool, by=identity.label, reason=body.reason)
    return ToolSwitchOut.model_validate(out)


@router.post("/tools/enable", response_model=ToolSwitchOut, summary="Enable a tool again")
def enable_tool(request: Request, body: ToolSwitchIn, identity: ToolSwitcher) -> ToolSwitchOut:
    """The tool's calls go through the gate again from its next decision."""
    out = deps(request).client.enable_tool(body.tool, by=identity.label)
    return ToolSwitchOut.model_validate(out)


@router.get("/policy", response_model=PolicyOut, summary="The deployment policy")
def policy(request: Request, identity: PolicyApprover) -> PolicyOut:
    """The server's deployment policy (its tool contracts and gate settings, one hash),
    whether an operator approved it, and what changed since the latest approved one."""
    return PolicyOut.model_validate(deps(request).client.policy())


@router.post(
    "/policy/approvals", response_model=PolicyApprovalOut, summary="Approve the deployment policy"
)
def approve_policy(
    request: Request, body: PolicyApprovalIn, identity: PolicyApprover
) -> PolicyApprovalOut:
    """With ``WARRANT_POLICY_APPROVAL=required`` policy workers under this hash decide from
    their next proposal on. ``POLICY_HASH_MISMATCH`` unless ``policy_hash`` is the server's
    own policy (the one reviewed); approving again returns the approval (``changed`` false)."""
    out = deps(request).client.approve_policy(body.policy_hash, by=identity.label, note=body.note)
    return PolicyApprovalOut.model_validate(out)


# -- Replay and policy review (an operator's) ------------------------------------------------

Reviewer = Annotated[Identity, Depends(requires(Action.REVIEW_POLICY))]


@router.post("/runs/{run_id}/replay", response_model=ReplayOut, summary="Replay a run")
def replay_run(request: Request, run_id: RunId, body: ReplayIn, identity: Reviewer) -> ReplayOut:
    """The run's recorded proposals decided again by the server's policy (or the
    candidate's), the tools dry: each step's recorded and today's decision, and the change.
    The replay is recorded as a run of kind ``replay``."""
    out = deps(request).client.replay_run(run_id, candidate=body.candidate, by=identity.label)
    return ReplayOut.model_validate(out)


@router.post("/policy/diff", response_model=PolicyDiffOut, summary="Review a policy")
def policy_diff(request: Request, body: PolicyDiffIn, identity: Reviewer) -> PolicyDiffOut:
    """The runs of the last ``since_s`` seconds replayed: the decisions that would change,
    by tool and code, with their runs."""
    client = deps(request).client
    out = client.policy_diff(since_s=body.since_s, candidate=body.candidate, limit=body.limit)
    return PolicyDiffOut.model_validate(out)
