"""Rows the stages' rare paths work on under row locks (the ORM session path).

The hot path uses single statements (:mod:`warrant.ledger.repo`); a cancel, a retry, a
reconciliation or a handoff locks the run and its command first and works on the rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from warrant.ledger.chain import row_values
from warrant.ledger.models import (
    Command,
    Confirmation,
    GrantRow,
    Handoff,
    Observation,
    OutcomeRow,
    PreApproval,
    Proposal,
    Reconciliation,
    Run,
)
from warrant.ledger.repo import note_rows, run_view
from warrant.ledger.stage_loads import artifacts_made_by
from warrant.runner.canonical import idempotency_token, sha256_hex
from warrant.runner.gate import Accept, Reject
from warrant.runner.handoff import artifacts_made, build_bundle
from warrant.runner.run_machine import snapshot_after
from warrant.runner.views import RunView
from warrant.tools._contract import Tool
from warrant.tools._registry import Registry

__all__ = [
    "BundleFacts",
    "add_branch",
    "add_handoff",
    "attempt_outcome",
    "command",
    "command_outcomes",
    "cut_branches",
    "handoff_bundle",
    "lock_command",
    "lock_run",
    "outcome",
    "run",
    "set_proposal",
    "step_branches",
]


def lock_run(s: Session, run_id: str) -> Run | None:
    """The run, locked until the session ends."""
    return s.get(Run, run_id, with_for_update=True)


def run(s: Session, run_id: str) -> Run | None:
    return s.get(Run, run_id)


def lock_command(s: Session, command_id: str) -> Command | None:
    """The command, locked until the session ends."""
    return s.get(Command, command_id, with_for_update=True)


def command(s: Session, command_id: str) -> Command | None:
    return s.get(Command, command_id)


def outcome(s: Session, outcome_id: int) -> OutcomeRow | None:
    return s.get(OutcomeRow, outcome_id)


def attempt_outcome(s: Session, command_id: str, attempt: int) -> OutcomeRow | None:
    """The outcome recorded for one attempt of a command, locked."""
    return s.scalars(
        select(OutcomeRow)
        .where(OutcomeRow.command_id == command_id, OutcomeRow.attempt == attempt)
        .with_for_update()
    ).first()


def command_outcomes(s: Session, command_id: str) -> list[OutcomeRow]:
    """Every outcome recorded for a command (one per attempt), oldest first."""
    return list(
        s.scalars(
            select(OutcomeRow).where(OutcomeRow.command_id == command_id).order_by(OutcomeRow.id)
        ).all()
    )


def set_proposal(s: Session, proposal_pk: int, **values: Any) -> None:
    s.execute(update(Proposal).where(Proposal.id == proposal_pk).values(**values))


# -- What a handoff bundle shows, read from the ledger, and the handoff row itself.


def unknown_effects(
    s: Session, run_id: str
) -> list[tuple[OutcomeRow, Command, list[Reconciliation]]]:
    """The run's ``unknown`` outcomes, accepted jobs and effects whose postcondition failed,
    each with its command and its reconciliation (or poll) history."""
    rows = s.execute(
        select(OutcomeRow, Command)
        .join(Command, Command.id == OutcomeRow.command_id)
        .where(
            OutcomeRow.run_id == run_id,
            OutcomeRow.status.in_(["unknown", "accepted"])
            | (OutcomeRow.code == "TOOL_POSTCONDITION_FAILED"),
        )
        .order_by(OutcomeRow.id)
    ).all()
    out = []
    for outcome, cmd in rows:
        history = s.scalars(
            select(Reconciliation)
            .where(Reconciliation.command_id == cmd.id)
            .order_by(Reconciliation.id)
        ).all()
        out.append((outcome, cmd, list(history)))
    return out


def observations(s: Session, run_id: str) -> list[dict[str, Any]]:
    return [
        {
            "observation_id": o.observation_id,
            "kind": o.kind,
            "source": o.source,
            "step": o.step,
            "content": o.content,
        }
        for o in s.scalars(
            select(Observation).where(Observation.run_id == run_id).order_by(Observation.id)
        )
    ]


def pending_proposal(s: Session, run: Run) -> Proposal | None:
    """The proposal the run waits on, or the one its active command came from."""
    proposal_pk = run.pending_proposal_id
    if proposal_pk is None and run.active_command_id:
        cmd = s.get(Command, run.active_command_id)
        proposal_pk = cmd.proposal_pk if cmd else None
    return s.get(Proposal, proposal_pk) if proposal_pk is not None else None


def _masked(arguments: dict[str, Any] | None, sensitive: frozenset[str] | None) -> dict[str, Any]:
    """``sensitive`` None (no registry at hand): every value masked."""
    return {
        k: ("<sensitive>" if sensitive is None or k in sensitive else v)
        for k, v in (arguments or {}).items()
    }


def _sensitive(registry: Registry | None, tool: Tool[Any, Any] | None) -> frozenset[str] | None:
    if registry is None:
        return None
    return tool.masked_fields if tool else frozenset()


def _unknown_effect(
    outcome: OutcomeRow, cmd: Command, history: list[Reconciliation], registry: Registry | None
) -> dict[str, Any]:
    tool = registry.get(cmd.tool, cmd.tool_version) if registry is not None else None
    return {
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
        "arguments": _masked(cmd.arguments, _sensitive(registry, tool)),
        "reconcilable": bool(tool and tool.reconcile),
        "reconciliation_history": [
            {"attempt": r.attempt, "result": r.result, "at": r.created_at.isoformat()}
            for r in history
        ],
    }


def _pending(
    p: Proposal | None, registry: Registry | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The pending proposal (sensitive arguments masked) and what its tool requires."""
    if p is None:
        return None, None
    tool = registry.get(p.tool or "", p.tool_version or "") if registry is not None else None
    pending = {
        "proposal_id": p.proposal_id,
        "step": p.step,
        "tool": p.tool,
        "tool_version": p.tool_version,
        "status": p.status,
        "rejection_code": p.rejection_code,
        "proposal_hash": p.proposal_hash,
        "arguments": _masked(p.arguments, _sensitive(registry, tool)),
    }
    required = None
    if tool is not None:
        required = {
            "capabilities": list(tool.capabilities),
            "confirmation": tool.confirmation.value,
            "side_effect": tool.side_effect.value,
        }
    return pending, required


@dataclass(frozen=True, kw_only=True)
class BundleFacts:
    """What a handoff adds to the run row: the step's charged counters (an escalating step's,
    not committed yet), what the planner said when it escalated, the time now."""

    counters: dict[str, Any] = field(default_factory=dict)
    escalated: dict[str, Any] | None = None
    now: float | None = None


def handoff_bundle(
    s: Session,
    run: Run,
    *,
    reason: str,
    registry: Registry | None,
    facts: BundleFacts | None = None,
) -> dict[str, Any]:
    """The handoff bundle of ``run`` (locked by the caller): the ledger's one read for it
    (pending proposal, observations, unknown effects, artifacts made) and the pure
    :func:`warrant.runner.handoff.build_bundle`. ``registry`` None: arguments all masked."""
    facts = facts or BundleFacts()
    view = run_view(run)
    pending, required = _pending(pending_proposal(s, run), registry)
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
        "budget": snapshot_after(view, int(facts.counters.get("step", run.step)), facts.counters),
        "trace_seq": run.trace_seq,
        "escalated": facts.escalated,
    }
    return build_bundle(
        run=info,
        reason=reason,
        observations=observations(s, run.id),
        pending_proposal=pending,
        required=required,
        unknown_effects=[_unknown_effect(*u, registry) for u in unknown_effects(s, run.id)],
        made=artifacts_made(artifacts_made_by(s, run.id)),
        now=facts.now,
    )


def add_handoff(s: Session, run_id: str, *, reason: str, bundle: dict[str, Any]) -> str:
    handoff_id = str(uuid.uuid4())
    s.add(Handoff(id=handoff_id, run_id=run_id, reason=reason, bundle=bundle))
    s.flush()
    return handoff_id


# -- a parallel step's branches (``warrant.runner.fan_in``)


def step_branches(s: Session, run_id: str, step: int) -> list[tuple[Command, OutcomeRow | None]]:
    """The commands of a parallel step's branches, each with its last outcome (None: none
    yet), by branch."""
    commands = s.scalars(
        select(Command)
        .where(Command.run_id == run_id, Command.step == step, Command.branch > 0)
        .order_by(Command.branch)
    ).all()
    ids = [cmd.id for cmd in commands]
    last = {
        o.command_id: o
        for o in s.scalars(
            select(OutcomeRow)
            .where(OutcomeRow.command_id.in_(ids))
            .distinct(OutcomeRow.command_id)
            .order_by(OutcomeRow.command_id, OutcomeRow.attempt.desc())
        )
    }
    return [(cmd, last.get(cmd.id)) for cmd in commands]


def cut_branches(s: Session, command_ids: list[str], *, at: Any) -> list[str]:
    """Cut a parallel step's branches still in flight: an ``issued`` one is discarded (it
    will never start), a ``started`` one marked ``cut_at`` (its attempt is interrupted, and
    its outcome only recorded). Returns the started ones (their running attempts to revoke)."""
    if not command_ids:
        return []
    s.execute(
        update(Command)
        .where(Command.id.in_(command_ids), Command.status == "issued")
        .values(status="discarded", cut_at=at)
    )
    started = s.scalars(
        update(Command)
        .where(Command.id.in_(command_ids), Command.status == "started")
        .values(cut_at=at)
        .returning(Command.id)
    ).all()
    return list(started)


def add_branch(
    s: Session,
    view: RunView,
    proposal: dict[str, Any],
    number: int,
    call: Any,
    decision: Accept | Reject | Any,
    *,
    deadline_at: float | None,
    now: float,
) -> Command | None:
    """One call of a parallel step: its proposal row (branch ``number``) with the gate's
    verdict and, if accepted, its command (its own idempotency token; its deadline cut to
    the step's branch deadline) with the grant, confirmation and pre-approval it uses."""
    row = _branch_proposal(view, proposal, number, call)
    s.add(row)
    note_rows(s, view.run_id, [("proposals", row_values("proposals", row))])
    if not isinstance(decision, Accept):
        row.rejection_code, row.fingerprint = decision.code, decision.fingerprint
        return None
    tool = decision.tool
    row.status, row.tool_version = "accepted", tool.version
    row.arguments, row.provenance = decision.arguments, decision.provenance
    row.fingerprint = row.proposal_hash = decision.proposal_hash
    s.flush()
    timeout = min(tool.timeout_s, view.deadline_at - now)
    if deadline_at is not None:
        timeout = min(timeout, deadline_at - now)
    timeout = max(0.001, timeout)
    pid = decision.proposal.proposal_id
    command = Command(
        id=str(uuid.uuid4()),
        run_id=view.run_id,
        proposal_pk=row.id,
        proposal_id=pid,
        step=proposal["step"],
        branch=number,
        tool=tool.name,
        tool_version=tool.version,
        arguments=decision.arguments,
        arguments_hash=decision.arguments_hash,
        idempotency_token=idempotency_token(
            view.run_id, pid, tool.version, decision.arguments_hash
        ),
        status="issued",
        attempts=0,
        timeout_s=timeout,
        deadline_at=datetime.fromtimestamp(now + timeout, tz=UTC),
        confirmation_id=decision.confirmation_id,
        grant_ids=list(decision.grant_ids),
        effect_key=decision.effect_key,
    )
    s.add(command)
    note_rows(s, view.run_id, [("commands", row_values("commands", command))])
    _use(s, decision, at=datetime.fromtimestamp(now, tz=UTC))
    return command


def _branch_proposal(view: RunView, proposal: dict[str, Any], number: int, call: Any) -> Proposal:
    """A parallel step's call ``number`` as a proposal row (lengths capped: it is untrusted)."""
    named = call if isinstance(call, dict) else {}
    pid, tool_name, version = (named.get(k) for k in ("proposal_id", "tool", "tool_version"))
    return Proposal(
        run_id=view.run_id,
        step=proposal["step"],
        branch=number,
        proposal_id=pid[:200] if isinstance(pid, str) else None,
        kind="tool",
        tool=tool_name[:200] if isinstance(tool_name, str) else None,
        tool_version=version[:50] if isinstance(version, str) else None,
        raw=call,
        observation_version=proposal["observation_version"],
        status="rejected",
    )


def _use(s: Session, decision: Accept, *, at: datetime) -> None:
    """What an accepted call uses: its grants (one use each), its confirmation, its
    pre-approval."""
    pid = decision.proposal.proposal_id
    if decision.grant_ids:
        used = list(decision.grant_ids)
        s.execute(update(GrantRow).where(GrantRow.id.in_(used)).values(uses=GrantRow.uses + 1))
    if decision.confirmation_id:
        s.execute(
            update(Confirmation)
            .where(Confirmation.id == decision.confirmation_id)
            .values(used=True, used_at=at)
        )
    if decision.pre_approval_id is not None:
        s.execute(
            update(PreApproval)
            .where(PreApproval.id == decision.pre_approval_id)
            .values(used_at=at, used_by_proposal=pid)
        )
