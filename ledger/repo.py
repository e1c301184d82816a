"""Repositories: the only SQL the stages use. Every run transition is a compare-and-set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from ledger.models import (
    Command,
    Confirmation,
    GrantRow,
    Observation,
    OutcomeRow,
    Proposal,
    Run,
    TraceEvent,
)
from runner.canonical import content_hash
from runner.codes import ObservationKind, Phase, RunStatus
from runner.spec import Budgets
from runner.state import ConfirmationView, GrantView, HistoryEntry, ObservationView, RunView

__all__ = [
    "NewObservation",
    "StaleVersion",
    "append_events",
    "confirmations_of",
    "grants_of",
    "history_of",
    "observations_of",
    "run_view",
    "to_datetime",
    "transition",
]


class StaleVersion(Exception):
    """The compare-and-set lost: another message already moved the run."""


@dataclass(frozen=True)
class NewObservation:
    observation_id: str
    kind: ObservationKind
    source: str
    content: dict[str, Any]
    expires_after_step: int | None = None


def to_datetime(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def run_view(run: Run) -> RunView:
    return RunView(
        run_id=run.id,
        status=RunStatus(run.status),
        phase=Phase(run.phase),
        version=run.version,
        step=run.step,
        model_calls=run.model_calls,
        tool_calls=run.tool_calls,
        observation_version=run.observation_version,
        deadline_at=run.deadline_at.timestamp(),
        subject=run.subject,
        budgets=Budgets.model_validate(run.spec.get("budgets", {})),
        tool_calls_by_tool=dict(run.tool_calls_by_tool or {}),
        tokens_used=run.tokens_used or 0,
        cost_used=run.cost_used or 0.0,
    )


def observations_of(s: Session, run_id: str) -> list[ObservationView]:
    status = Observation.content["status"].astext
    rows = s.execute(
        select(Observation.observation_id, Observation.kind, Observation.step, status)
        .where(Observation.run_id == run_id)
        .order_by(Observation.id)
    ).all()
    return [
        ObservationView(
            observation_id=o, kind=ObservationKind(k), step=st, succeeded=stat == "succeeded"
        )
        for o, k, st, stat in rows
    ]


def grants_of(s: Session, run_id: str) -> list[GrantView]:
    rows = s.scalars(select(GrantRow).where(GrantRow.run_id == run_id).order_by(GrantRow.id))
    return [
        GrantView(
            grant_id=g.id,
            run_id=g.run_id,
            capability=g.capability,
            resource_scope=g.resource_scope,
            expires_at_step=g.expires_at_step,
            max_uses=g.max_uses,
            uses=g.uses,
        )
        for g in rows
    ]


def confirmations_of(s: Session, run_id: str) -> list[ConfirmationView]:
    rows = s.scalars(
        select(Confirmation).where(Confirmation.run_id == run_id).order_by(Confirmation.created_at)
    )
    return [
        ConfirmationView(
            confirmation_id=c.id,
            run_id=c.run_id,
            proposal_hash=c.proposal_hash,
            tool=c.tool,
            approved=c.approved,
            used=c.used,
            expires_at_step=c.expires_at_step,
            expires_at=c.expires_at.timestamp(),
        )
        for c in rows
    ]


def history_of(s: Session, run_id: str, *, before_step: int) -> list[HistoryEntry]:
    rows = s.execute(
        select(Proposal.fingerprint, Proposal.observation_version)
        .where(
            Proposal.run_id == run_id,
            Proposal.step < before_step,
            Proposal.fingerprint.is_not(None),
        )
        .order_by(Proposal.step)
    ).all()
    return [HistoryEntry(fingerprint=str(f), observation_version=v) for f, v in rows]


def append_events(
    s: Session,
    run_id: str,
    events: Sequence[tuple[str, dict[str, Any]]],
    *,
    step: int,
    proposal_id: str | None = None,
    last_seq: int | None = None,
) -> None:
    """Append trace events with per-run sequence numbers (allocated on the run row)."""
    if not events:
        return
    if last_seq is None:
        last_seq = s.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(trace_seq=Run.trace_seq + len(events))
            .returning(Run.trace_seq)
        ).scalar_one()
    first = last_seq - len(events) + 1
    s.execute(
        insert(TraceEvent),
        [
            {
                "run_id": run_id,
                "seq": first + i,
                "event": name,
                "step": step,
                "proposal_id": proposal_id,
                "details": details,
            }
            for i, (name, details) in enumerate(events)
        ],
    )


def transition(
    s: Session,
    run_id: str,
    expected_version: int,
    *,
    changes: dict[str, Any],
    events: Sequence[tuple[str, dict[str, Any]]] = (),
    step: int,
    proposal_id: str | None = None,
    observation: NewObservation | None = None,
) -> int:
    """Compare-and-set the run from ``expected_version``; write its events and observation.

    Returns the new version, or raises :class:`StaleVersion` (the caller's transaction is
    then rolled back, so nothing of the stale message is kept).
    """
    values: dict[str, Any] = dict(changes)
    new_observation = False
    if observation is not None:
        digest = content_hash(observation.content)
        seen = s.execute(
            select(func.count())
            .select_from(Observation)
            .where(Observation.run_id == run_id, Observation.content_hash == digest)
        ).scalar_one()
        new_observation = seen == 0
        if new_observation:
            values["observation_version"] = Run.observation_version + 1
    values["version"] = Run.version + 1
    values["trace_seq"] = Run.trace_seq + len(events)
    values["updated_at"] = func.now()
    row = s.execute(
        update(Run)
        .where(Run.id == run_id, Run.version == expected_version)
        .values(**values)
        .returning(Run.version, Run.trace_seq, Run.observation_version)
    ).first()
    if row is None:
        raise StaleVersion(f"run {run_id} is no longer at version {expected_version}")
    version, last_seq, obs_version = row
    if observation is not None:
        s.add(
            Observation(
                run_id=run_id,
                observation_id=observation.observation_id,
                kind=observation.kind.value,
                source=observation.source,
                step=step,
                content=observation.content,
                content_hash=content_hash(observation.content),
                observation_version=obs_version,
                expires_after_step=observation.expires_after_step,
            )
        )
    append_events(s, run_id, events, step=step, proposal_id=proposal_id, last_seq=last_seq)
    return int(version)


def record_outcome(s: Session, **values: Any) -> bool:
    """Insert the command's one outcome; False if one was already recorded."""
    inserted = s.execute(
        insert(OutcomeRow)
        .values(**values)
        .on_conflict_do_nothing(constraint="uq_outcomes_command_attempt")
        .returning(OutcomeRow.id)
    ).first()
    return inserted is not None


def command_for_update(s: Session, command_id: str) -> Command | None:
    return s.scalars(select(Command).where(Command.id == command_id).with_for_update()).first()
