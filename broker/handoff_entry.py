"""Entering a handoff: gather the evidence from the ledger, build the bundle, move the run."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from warrant.ledger import rows as evidence
from warrant.ledger.models import Proposal, Run
from warrant.ledger.repo import commit, run_view
from warrant.runner import run_machine as machine
from warrant.runner.canonical import sha256_hex
from warrant.runner.run_machine import build_bundle
from warrant.tools._registry import Registry

__all__ = ["enter_handoff"]


def _masked(arguments: dict[str, Any] | None, sensitive: frozenset[str]) -> dict[str, Any]:
    return {k: ("<sensitive>" if k in sensitive else v) for k, v in (arguments or {}).items()}


def _unknown_effects(s: Session, run_id: str, registry: Registry) -> list[dict[str, Any]]:
    effects = []
    for outcome, cmd, history in evidence.unknown_effects(s, run_id):
        tool = registry.get(cmd.tool, cmd.tool_version)
        effects.append(
            {
                "command_id": cmd.id,
                "tool": cmd.tool,
                "tool_version": cmd.tool_version,
                "step": cmd.step,
                "code": outcome.code,
                "outcome": outcome.status,
                "operation_id": (outcome.output or {}).get("operation_id"),
                "compensation": (outcome.output or {}).get("compensation"),
                "attempt": outcome.attempt,
                "resolved_status": outcome.resolved_status,
                "idempotency_key_hash": sha256_hex(cmd.idempotency_token)[:16],
                "arguments": _masked(cmd.arguments, tool.masked_fields if tool else frozenset()),
                "reconcilable": bool(tool and tool.reconcile),
                "reconciliation_history": [
                    {"attempt": r.attempt, "result": r.result, "at": r.created_at.isoformat()}
                    for r in history
                ],
            }
        )
    return effects


def _pending(p: Proposal | None, registry: Registry) -> tuple[dict[str, Any] | None, Any]:
    """The pending proposal (sensitive arguments masked) and what its tool requires."""
    if p is None:
        return None, None
    tool = registry.get(p.tool or "", p.tool_version or "")
    pending = {
        "proposal_id": p.proposal_id,
        "step": p.step,
        "tool": p.tool,
        "tool_version": p.tool_version,
        "status": p.status,
        "rejection_code": p.rejection_code,
        "proposal_hash": p.proposal_hash,
        "arguments": _masked(p.arguments, tool.masked_fields if tool else frozenset()),
    }
    required = None
    if tool is not None:
        required = {
            "capabilities": list(tool.capabilities),
            "confirmation": tool.confirmation.value,
            "side_effect": tool.side_effect.value,
        }
    return pending, required


def _bundle(s: Session, run: Run, *, reason: str, registry: Registry) -> dict[str, Any]:
    pending, required = _pending(evidence.pending_proposal(s, run), registry)
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
    return build_bundle(
        run=info,
        reason=reason,
        observations=evidence.observations(s, run.id),
        pending_proposal=pending,
        required=required,
        unknown_effects=_unknown_effects(s, run.id, registry),
    )


def enter_handoff(
    s: Session,
    run: Run,
    *,
    reason: str,
    registry: Registry,
    events: list[tuple[str, dict[str, Any]]] | None = None,
    late_effect: bool = False,
) -> str:
    """Build the bundle and move ``run`` (locked by the caller) to ``handoff``. A run that
    had already ended is reopened only for ``late_effect`` (an effect found after its end)."""
    bundle = _bundle(s, run, reason=reason, registry=registry)
    handoff_id = evidence.add_handoff(s, run.id, reason=reason, bundle=bundle)
    view = run_view(run)
    if late_effect and view.status.terminal:
        change = machine.reopen_for_late_effect(view, handoff_id=handoff_id, events=events or [])
    else:
        change = machine.hand_off(view, handoff_id=handoff_id, reason=reason, events=events or [])
    commit(s, change, step=run.step)
    return handoff_id
