"""Writes to ledger rows a stage has loaded and holds locked in its transaction.

The stages decide (with the pure core) and the ledger writes: every change of a command's,
an outcome's or a run's columns outside a run transition goes through one of these functions,
so a column's meaning is set in one place and ``make architecture`` can count the writes that
bypass them (``orm_writes_outside_ledger``, target 0)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlalchemy.orm import Session, object_session

from warrant.ledger.chain import row_values
from warrant.ledger.models import Command, OutcomeRow, Reconciliation, Run
from warrant.ledger.repo import note_rows
from warrant.runner.codes import CommandStatus

__all__ = [
    "count_reconciliation",
    "finish_command",
    "merge_outcome_output",
    "note_republished",
    "outcome_became_job",
    "reissue_command_row",
    "resolve_outcome",
    "schedule_reconciliation",
]


def finish_command(cmd: Command, *, stamp: bool = False) -> None:
    """The command has its outcome (``stamp``: it ends now, ``finished_at`` is set)."""
    cmd.status = CommandStatus.COMPLETED.value
    if stamp:
        cmd.finished_at = func.now()


def reissue_command_row(cmd: Command, *, timeout_s: float, deadline_at: datetime) -> None:
    """Another attempt of the same command (same idempotency token) is scheduled."""
    cmd.status, cmd.timeout_s, cmd.deadline_at = CommandStatus.ISSUED.value, timeout_s, deadline_at


def resolve_outcome(outcome: OutcomeRow, status: str, *, stamp: bool = True) -> None:
    """The outcome's effect is known (``applied``, ``not_applied``, ``succeeded``, ...) or was
    handed to a person (``handoff``); ``stamp`` sets ``resolved_at`` to the database's now."""
    outcome.resolved_status = status
    if stamp:
        outcome.resolved_at = func.now()


def settle_branch_job(
    outcome: OutcomeRow, status: str, *, output: dict[str, Any] | None, code: str | None
) -> None:
    """A parallel step's job (a sub-run) ended: resolved ``status`` (``succeeded`` or
    ``failed``), its final output kept on the outcome beside the operation id (what the step's
    merge shows of the branch), and its code."""
    resolve_outcome(outcome, status)
    outcome.output = {**(outcome.output or {}), **(output or {})}
    outcome.code = code
    _rehashed(outcome)


def schedule_reconciliation(outcome: OutcomeRow, at: datetime | None) -> None:
    """When the reconciler looks at this unresolved outcome next."""
    outcome.next_reconcile_at = at


def count_reconciliation(
    s: Session,
    outcome: OutcomeRow,
    *,
    run_id: str,
    command_id: str,
    result: str,
    detail: dict[str, Any] | None = None,
) -> int:
    """One more question to the tool (or the job) about the effect: its row, and the count.
    Returns this attempt's number."""
    attempt = outcome.reconcile_attempts + 1
    outcome.reconcile_attempts = attempt
    s.add(
        Reconciliation(
            run_id=run_id, command_id=command_id, attempt=attempt, result=result, detail=detail
        )
    )
    return attempt


def merge_outcome_output(outcome: OutcomeRow, found: dict[str, Any]) -> None:
    """What the reconciler found about a batch's items, over what the attempt reported."""
    outcome.output = {**(outcome.output or {}), **found}
    _rehashed(outcome)


def outcome_became_job(outcome: OutcomeRow, operation_id: str) -> None:
    """A lost answer whose effect is the service's job: the outcome is that job's acceptance."""
    outcome.status, outcome.output = "accepted", {"operation_id": operation_id}
    outcome.reconcile_attempts, outcome.next_reconcile_at = 0, None
    _rehashed(outcome)


def _rehashed(outcome: OutcomeRow) -> None:
    """An outcome's hashed columns changed: its new hash goes into the run's trace
    (:func:`warrant.ledger.repo.note_rows`), so ``ledger verify`` holds it to the new ones."""
    s = object_session(outcome)
    if s is not None:
        note_rows(s, outcome.run_id, [("outcomes", row_values("outcomes", outcome))])


def note_republished(run: Run, *, version: int, count: int) -> None:
    """The stalled run's message was published again for ``version`` (``count`` times)."""
    run.republish_version, run.republish_count = version, count
