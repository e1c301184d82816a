"""Policy stage: run the pure gate on the pending proposal and act on its decision."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from sqlalchemy import update

from broker import telemetry
from broker.context import StageContext
from broker.faults import crash_point
from broker.handoffs import enter_handoff
from broker.publish import Outbox
from broker.transitions import HARD_LIMIT_GRACE_S, stop_changes, stop_events
from broker.views import POLICY_OBSERVATION_TTL_STEPS
from ledger.db import session_scope
from ledger.models import Command, Confirmation, GrantRow, Proposal, Run
from ledger.repo import (
    NewObservation,
    StaleVersion,
    confirmations_of,
    grants_of,
    history_of,
    run_view,
    to_datetime,
    transition,
)
from runner import policy
from runner.canonical import idempotency_token
from runner.codes import ObservationKind, ObservationSource, Phase, RunStatus, StopReason
from runner.planning import Stop

__all__ = ["policy_evaluate"]

log = logging.getLogger("warrant.policy")


def _outcome_name(decision: object) -> str:
    code = getattr(decision, "code", None) or getattr(decision, "reason", None)
    name = type(decision).__name__.lower()
    return f"{name}:{code}" if code else name


def _events(decision_events: list[policy.Event]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, e.details) for e in decision_events]


def policy_evaluate(ctx: StageContext, run_id: str, version: int) -> str:
    """Returns ``ignored``, ``rejected``, ``stopped``, ``waiting`` or ``accepted``."""
    outbox = Outbox()
    now = ctx.clock()
    try:
        with session_scope(ctx.engine) as s:
            run = s.get(Run, run_id)
            if run is None or run.version != version or run.pending_proposal_id is None:
                return "ignored"
            view = run_view(run)
            proposal = s.get(Proposal, run.pending_proposal_id)
            assert proposal is not None
            with telemetry.span(
                "policy.evaluate",
                run_id=run_id,
                proposal_id=proposal.proposal_id,
                tool=proposal.tool,
            ) as sp:
                decision = policy.evaluate(
                    policy.GateInput(
                        raw=proposal.raw,
                        run=view,
                        expected_version=version,
                        grants=grants_of(s, run_id),
                        confirmations=confirmations_of(s, run_id),
                        history=history_of(s, run_id, before_step=proposal.step),
                        registry=ctx.registry,
                        now=now,
                    ),
                    on_event=telemetry.layer_observer(
                        run_id=run_id, proposal_id=proposal.proposal_id
                    ),
                )
                if sp is not None:
                    sp.set_attribute("warrant.outcome", _outcome_name(decision))
            step, pid = proposal.step, proposal.proposal_id
            if isinstance(decision, policy.Ignore):
                log.info("policy ignoring run=%s: %s", run_id, decision.reason)
                return "ignored"
            if isinstance(decision, policy.Reject):
                proposal.status, proposal.rejection_code = "rejected", decision.code
                proposal.fingerprint = decision.fingerprint
                new_version = transition(
                    s,
                    run_id,
                    version,
                    changes={"phase": Phase.PLANNING.value, "pending_proposal_id": None},
                    events=_events(decision.events),
                    step=step,
                    proposal_id=pid,
                    observation=NewObservation(
                        f"policy-{step}",
                        ObservationKind.POLICY_REJECTION,
                        ObservationSource.POLICY.value,
                        {"code": decision.code, "layer": decision.layer, "tool": proposal.tool},
                        step + POLICY_OBSERVATION_TTL_STEPS,
                    ),
                )
                outbox.add(lambda: ctx.publisher.planner(run_id, new_version))
                result = "rejected"
            elif isinstance(decision, policy.Stop):
                proposal.status, proposal.fingerprint = "stopped", decision.fingerprint
                looping = decision.reason in (
                    StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION,
                    StopReason.PROPOSAL_OSCILLATION_DETECTED,
                )
                if looping and run.spec.get("handoff", {}).get("on_repeated_proposal"):
                    s.flush()
                    enter_handoff(
                        s,
                        run,
                        reason=decision.reason.value,
                        registry=ctx.registry,
                        events=_events(decision.events),
                    )
                    return "handoff"
                stop = Stop(decision.status, decision.reason, decision.detail)
                transition(
                    s,
                    run_id,
                    version,
                    changes=stop_changes(stop),
                    events=[*_events(decision.events), *stop_events(view, stop, step=step)],
                    step=step,
                    proposal_id=pid,
                )
                result = "stopped"
            elif isinstance(decision, policy.AwaitConfirmation):
                request = decision.request()
                ttl = view.budgets.confirmation_ttl_s
                request["expires_at"] = min(now + ttl, view.deadline_at)
                request["expires_at_step"] = step + view.budgets.confirmation_steps
                proposal.status = "waiting_confirmation"
                proposal.tool_version = decision.tool.version
                proposal.fingerprint = proposal.proposal_hash = decision.proposal_hash
                proposal.arguments = decision.arguments
                proposal.confirmation_request = request
                transition(
                    s,
                    run_id,
                    version,
                    changes={
                        "status": RunStatus.WAITING_CONFIRMATION.value,
                        "phase": Phase.IDLE.value,
                        "stop_reason": StopReason.USER_CONFIRMATION_REQUIRED.value,
                    },
                    events=[
                        *_events(decision.events),
                        (
                            "confirmation.requested",
                            {"proposal_hash": decision.proposal_hash, "tool": decision.tool.name},
                        ),
                        (
                            "state.transitioned",
                            {"from": view.status.value, "to": RunStatus.WAITING_CONFIRMATION.value},
                        ),
                    ],
                    step=step,
                    proposal_id=pid,
                )
                result = "waiting"
            else:
                result = _accept(ctx, s, run, proposal, decision, version, now, outbox)
    except StaleVersion:
        return "ignored"
    crash_point("policy:after_commit", run_id)
    outbox.flush()
    return result


def _accept(
    ctx: StageContext,
    s: Any,
    run: Run,
    proposal: Proposal,
    decision: policy.Accept,
    version: int,
    now: float,
    outbox: Outbox,
) -> str:
    tool = decision.tool
    view = run_view(run)
    timeout = max(0.001, min(tool.timeout_s, view.deadline_at - now))
    command_id = str(uuid.uuid4())
    pid = decision.proposal.proposal_id
    token = idempotency_token(run.id, pid, tool.version, decision.arguments_hash)
    proposal.status = "accepted"
    proposal.tool_version = tool.version
    proposal.arguments = decision.arguments
    proposal.fingerprint = proposal.proposal_hash = decision.proposal_hash
    s.add(
        Command(
            id=command_id,
            run_id=run.id,
            proposal_pk=proposal.id,
            proposal_id=pid,
            step=proposal.step,
            tool=tool.name,
            tool_version=tool.version,
            arguments=decision.arguments,
            arguments_hash=decision.arguments_hash,
            idempotency_token=token,
            status="issued",
            attempts=0,
            timeout_s=timeout,
            deadline_at=to_datetime(now + timeout),
            confirmation_id=decision.confirmation_id,
            grant_ids=list(decision.grant_ids),
        )
    )
    if decision.grant_ids:
        s.execute(
            update(GrantRow)
            .where(GrantRow.id.in_(decision.grant_ids))
            .values(uses=GrantRow.uses + 1)
        )
    if decision.confirmation_id:
        s.execute(
            update(Confirmation)
            .where(Confirmation.id == decision.confirmation_id)
            .values(used=True, used_at=to_datetime(now))
        )
    by_tool = dict(run.tool_calls_by_tool or {})
    by_tool[tool.name] = by_tool.get(tool.name, 0) + 1
    s.flush()
    new_version = transition(
        s,
        run.id,
        version,
        changes={
            "phase": Phase.TOOL.value,
            "tool_calls": run.tool_calls + 1,
            "tool_calls_by_tool": by_tool,
            "pending_proposal_id": None,
            "active_command_id": command_id,
        },
        events=[
            *_events(decision.events),
            (
                "command.issued",
                {
                    "command_id": command_id,
                    "tool": tool.name,
                    "version": tool.version,
                    "timeout_s": round(timeout, 3),
                    "arguments_hash": decision.arguments_hash,
                },
            ),
        ],
        step=proposal.step,
        proposal_id=pid,
    )
    outbox.add(
        lambda: ctx.publisher.tool(
            run_id=run.id,
            version=new_version,
            command_id=command_id,
            tool=tool.name,
            soft_time_limit=timeout,
            time_limit=timeout + HARD_LIMIT_GRACE_S,
        )
    )
    return "accepted"
