"""What became of one step's proposal, read in one session: the run, the step's proposal, its
command, the command's latest outcome and the policy's refusal (queries only). The pure
:func:`warrant.runner.external.decision_of` turns these facts into a caller's decision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from warrant.ledger.models import Command, Observation, OutcomeRow, Proposal, Run
from warrant.runner.codes import StopReason

__all__ = [
    "REFUSED_FINAL_CODES",
    "StepFacts",
    "refused_finals",
    "step_facts",
    "step_raw",
]

#: The rejection codes of a final answer refused at its step.
REFUSED_FINAL_CODES = (
    StopReason.FINAL_CITATION_VALIDATION_FAILED.value,
    StopReason.SUCCESS_CONDITION_NOT_MET.value,
)


@dataclass(frozen=True)
class StepFacts:
    run: dict[str, Any]
    """``status``, ``phase``, ``step``, ``version``, ``stop_reason``, ``answer``, ``planner``
    (the spec's planner kind) and whether the step's proposal is the pending one."""
    proposal: dict[str, Any] | None
    command: dict[str, Any] | None
    outcome: dict[str, Any] | None
    refusal: dict[str, Any] | None
    """The policy observation of the step (``code``, ``reason``), if it was refused."""


def step_facts(s: Session, run_id: str, step: int, *, branch: int = 0) -> StepFacts | None:
    """The facts of ``step`` of ``run_id`` (None: no such run), from one snapshot: the run and
    its outcome as of the same moment (``REPEATABLE READ``; call it on a fresh session).
    ``branch``: one call of a parallel step (until the gate has written it: the step's own
    proposal, whose refusal refuses every call of the set)."""
    s.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    run = s.get(Run, run_id)
    if run is None:
        return None
    proposal = _step_proposal(s, run_id, step, branch)
    if proposal is None and branch:
        lead = _step_proposal(s, run_id, step, 0)
        proposal = lead if lead is not None and lead.status != "received" else None
    command = None
    outcome = None
    if proposal is not None:
        command = s.scalars(
            select(Command).where(Command.proposal_pk == proposal.id).limit(1)
        ).first()
    if command is not None:
        outcome = s.scalars(
            select(OutcomeRow)
            .where(OutcomeRow.command_id == command.id)
            .order_by(OutcomeRow.id.desc())
            .limit(1)
        ).first()
    refusal = s.scalars(
        select(Observation.content).where(
            Observation.run_id == run_id, Observation.observation_id == f"policy-{step}"
        )
    ).first()
    return StepFacts(
        run={
            "status": run.status,
            "phase": run.phase,
            "step": run.step,
            "version": run.version,
            "stop_reason": run.stop_reason,
            "answer": run.answer,
            "planner": (run.spec.get("planner") or {}).get("kind"),
            "pending": proposal is not None and run.pending_proposal_id == proposal.id,
        },
        proposal=_fields(proposal, _PROPOSAL_FIELDS),
        command=_fields(command, _COMMAND_FIELDS),
        outcome=_fields(outcome, _OUTCOME_FIELDS),
        refusal=dict(refusal) if refusal else None,
    )


def step_raw(s: Session, run_id: str, step: int) -> Any:
    """The raw proposal recorded for ``step`` (None: none)."""
    proposal = _step_proposal(s, run_id, step, 0)
    return None if proposal is None else proposal.raw


def _step_proposal(s: Session, run_id: str, step: int, branch: int) -> Proposal | None:
    return s.scalars(
        select(Proposal)
        .where(Proposal.run_id == run_id, Proposal.step == step, Proposal.branch == branch)
        .order_by(Proposal.id.desc())
        .limit(1)
    ).first()


#: What a caller reads of the step's proposal, its command and the command's latest outcome.
_PROPOSAL_FIELDS = (
    "proposal_id",
    "kind",
    "tool",
    "tool_version",
    "raw",
    "status",
    "rejection_code",
    "proposal_hash",
    "confirmation_request",
)
_COMMAND_FIELDS = ("id", "status", "attempts", "step", "branch")
_OUTCOME_FIELDS = ("status", "code", "message", "output", "resolved_status")


def _fields(
    row: Proposal | Command | OutcomeRow | None, names: tuple[str, ...]
) -> dict[str, Any] | None:
    """``row``'s columns ``names`` by name (None: no row)."""
    if row is None:
        return None
    return {name: getattr(row, name) for name in names}


def refused_finals(conn: Any, run_id: str) -> int:
    """Final answers of the run refused (and planned again): for their citations, or given
    while the spec's success conditions did not hold."""
    return _proposals(
        conn, run_id, Proposal.kind == "final", Proposal.rejection_code.in_(REFUSED_FINAL_CODES)
    )


def _proposals(conn: Any, run_id: str, *where: Any) -> int:
    """How many of the run's proposal rows match ``where``."""
    query = select(func.count()).select_from(Proposal).where(Proposal.run_id == run_id, *where)
    return int(conn.execute(query).scalar_one())
