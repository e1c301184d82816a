"""Entering a handoff: gather the evidence from the ledger, build the bundle, move the run."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from warrant.ledger.models import (
    Command,
    Handoff,
    Observation,
    OutcomeRow,
    Proposal,
    Reconciliation,
    Run,
)
from warrant.ledger.repo import transition
from warrant.runner.canonical import sha256_hex
from warrant.runner.codes import Phase, RunStatus
from warrant.runner.handoff import build_bundle
from warrant.tools.registry import Registry

__all__ = ["enter_handoff"]


def _masked(arguments: dict[str, Any] | None, sensitive: frozenset[str]) -> dict[str, Any]:
    return {k: ("<sensitive>" if k in sensitive else v) for k, v in (arguments or {}).items()}


def _unknown_effects(s: Session, run_id: str, registry: Registry) -> list[dict[str, Any]]:
    rows = s.execute(
        select(OutcomeRow, Command)
        .join(Command, Command.id == OutcomeRow.command_id)
        .where(OutcomeRow.run_id == run_id, OutcomeRow.status == "unknown")
        .order_by(OutcomeRow.id)
    ).all()
    effects = []
    for outcome, cmd in rows:
        history = s.scalars(
            select(Reconciliation)
            .where(Reconciliation.command_id == cmd.id)
            .order_by(Reconciliation.id)
        )
        tool = registry.get(cmd.tool, cmd.tool_version)
        effects.append(
            {
                "command_id": cmd.id,
                "tool": cmd.tool,
                "tool_version": cmd.tool_version,
                "step": cmd.step,
                "code": outcome.code,
                "attempt": outcome.attempt,
                "resolved_status": outcome.resolved_status,
                "idempotency_key_hash": sha256_hex(cmd.idempotency_token)[:16],
                "arguments": _masked(cmd.arguments, tool.sensitive_fields if tool else frozenset()),
                "reconcilable": bool(tool and tool.reconcile),
                "reconciliation_history": [
                    {"attempt": r.attempt, "result": r.result, "at": r.created_at.isoformat()}
                    for r in history
                ],
            }
        )
    return effects


def enter_handoff(
    s: Session,
    run: Run,
    *,
    reason: str,
    registry: Registry,
    events: list[tuple[str, dict[str, Any]]] | None = None,
) -> str:
    """Build the bundle and move ``run`` (locked by the caller) to ``handoff``."""
    observations = [
        {
            "observation_id": o.observation_id,
            "kind": o.kind,
            "source": o.source,
            "step": o.step,
            "content": o.content,
        }
        for o in s.scalars(
            select(Observation).where(Observation.run_id == run.id).order_by(Observation.id)
        )
    ]
    pending = None
    required = None
    proposal_pk = run.pending_proposal_id
    if proposal_pk is None and run.active_command_id:
        cmd = s.get(Command, run.active_command_id)
        proposal_pk = cmd.proposal_pk if cmd else None
    if proposal_pk is not None:
        p = s.get(Proposal, proposal_pk)
        if p is not None:
            tool = registry.get(p.tool or "", p.tool_version or "")
            pending = {
                "proposal_id": p.proposal_id,
                "step": p.step,
                "tool": p.tool,
                "tool_version": p.tool_version,
                "status": p.status,
                "rejection_code": p.rejection_code,
                "proposal_hash": p.proposal_hash,
                "arguments": _masked(p.arguments, tool.sensitive_fields if tool else frozenset()),
            }
            if tool is not None:
                required = {
                    "capabilities": list(tool.capabilities),
                    "confirmation": tool.confirmation.value,
                    "side_effect": tool.side_effect.value,
                }
    info = {
        "run_id": run.id,
        "status": run.status,
        "phase": run.phase,
        "version": run.version,
        "step": run.step,
        "stop_reason": run.stop_reason,
        "goal": run.goal,
        "budgets": {
            "step": run.step,
            "model_calls": run.model_calls,
            "tool_calls": run.tool_calls,
            **run.spec.get("budgets", {}),
        },
    }
    bundle = build_bundle(
        run=info,
        reason=reason,
        observations=observations,
        pending_proposal=pending,
        required=required,
        unknown_effects=_unknown_effects(s, run.id, registry),
    )
    handoff_id = str(uuid.uuid4())
    s.add(Handoff(id=handoff_id, run_id=run.id, reason=reason, bundle=bundle))
    s.flush()
    transition(
        s,
        run.id,
        run.version,
        changes={
            "status": RunStatus.HANDOFF.value,
            "phase": Phase.IDLE.value,
            "stop_reason": reason,
        },
        events=[
            *(events or []),
            ("handoff.created", {"handoff_id": handoff_id, "reason": reason}),
            ("state.transitioned", {"from": run.status, "to": RunStatus.HANDOFF.value}),
        ],
        step=run.step,
    )
    return handoff_id
