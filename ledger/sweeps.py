"""The reconciler's queries: what each sweep category finds, and the rows it locks.

Each finder is an indexed query on status with a batch limit (a sweep costs what it finds);
each locker re-reads its rows ``FOR UPDATE`` so an action sees the row as it is now.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, and_, case, func, literal_column, or_, select, update
from sqlalchemy.orm import Session

from warrant.ledger.models import Command, OutcomeRow, Proposal, Reconciliation, Run
from warrant.runner.codes import ErrorCode, RunStatus
from warrant.runner.errors import StateConflict

__all__ = [
    "SweepLock",
    "SweepLockLost",
    "attempt_may_run",
    "due_unknown_outcomes",
    "lock_unresolved",
    "quiet_since",
    "run_trace_id",
    "stale_commands",
    "stalled_runs",
    "sweep_lock",
    "touch_run",
    "waiting_confirmations",
    "waiting_grants_due",
]


class SweepLockLost(StateConflict):
    """The sweep's exclusion ended under it (its session was ended: the process was frozen
    or cut off for longer than the lock's timeout); another sweep may be running."""

    code: str = ErrorCode.SWEEP_LOCK_LOST


class SweepLock:
    """A held (or refused) sweep exclusion; :meth:`check` raises once it has been lost."""

    def __init__(self, *, held: bool, timeout_s: float) -> None:
        self.held = held
        self.timeout_s = timeout_s
        self.lost = threading.Event()
        self.renewed = time.monotonic()
        """When the session last answered (a frozen process's monotonic clock goes on)."""

    def check(self) -> None:
        """Raise :class:`SweepLockLost` if a renewal failed, or none succeeded for two thirds
        of the timeout (the process was frozen: the server may have ended the session)."""
        if time.monotonic() - self.renewed > self.timeout_s * 2 / 3:
            self.lost.set()
        if self.lost.is_set():
            raise SweepLockLost("the sweep lock's session ended: another sweep may run")


@contextmanager
def sweep_lock(engine: Engine, key: int, *, timeout_s: float) -> Iterator[SweepLock]:
    """The advisory lock ``key`` for the block if no one else holds it (``held`` False then).

    Transaction-scoped (``pg_try_advisory_xact_lock``) in a transaction whose session the
    server ends once it has been idle for ``timeout_s``
    (``idle_in_transaction_session_timeout``): a holder that vanishes (its host lost, its
    process frozen) keeps it at most ``timeout_s``, whatever TCP knows. A live holder's
    keeper thread renews it (one ``SELECT 1``) every third of that; if a renewal fails, the
    lock is lost and :meth:`SweepLock.check` says so."""
    with engine.connect() as conn:
        conn.execute(
            select(func.set_config("idle_in_transaction_session_timeout", f"{timeout_s}s", True))
        )
        got = conn.execute(select(func.pg_try_advisory_xact_lock(key))).scalar()
        lock = SweepLock(held=bool(got), timeout_s=timeout_s)
        if not lock.held:
            conn.rollback()
            yield lock
            return
        done = threading.Event()
        keeper = threading.Thread(
            target=_keep, args=(conn, lock, done, timeout_s / 3), name="sweep-lock", daemon=True
        )
        keeper.start()
        try:
            yield lock
        finally:
            done.set()
            keeper.join(timeout_s)
            if keeper.is_alive() or lock.lost.is_set():
                conn.invalidate()  # a session the server ended, or a renewal still stuck
            else:
                conn.rollback()  # releases the lock


def _keep(conn: Connection, lock: SweepLock, done: threading.Event, every_s: float) -> None:
    while not done.wait(every_s):
        try:
            conn.execute(select(literal_column("1")))
        except Exception:  # the session is gone: so is the lock
            lock.lost.set()
            return
        lock.renewed = time.monotonic()


def stale_commands(
    s: Session, *, extra_s: float, limit: int, heartbeat_timeout_s: float = 15.0
) -> list[str]:
    """``started`` commands of live runs past their lease: older than their time limit plus
    ``extra_s`` (a prefork attempt), or whose heartbeat is older than ``heartbeat_timeout_s``
    (a threads-pool attempt, which no time limit ends). A parallel step's call is one whatever
    its run does now (it may have moved on, or ended, while the call was in flight)."""
    return list(
        s.scalars(
            select(Command.id)
            .join(Run, Run.id == Command.run_id)
            .where(
                # a literal, not a parameter: a generic plan can then use the partial index
                Command.status == literal_column("'started'"),
                or_(
                    and_(
                        Command.heartbeat_at.is_(None),
                        Command.started_at
                        + func.make_interval(0, 0, 0, 0, 0, 0, Command.timeout_s + extra_s)
                        < func.now(),
                    ),
                    Command.heartbeat_at + func.make_interval(0, 0, 0, 0, 0, 0, heartbeat_timeout_s)
                    < func.now(),
                ),
                or_(
                    Run.status.in_([RunStatus.RUNNING.value, RunStatus.CANCELLING.value]),
                    Command.branch > 0,
                ),
            )
            .limit(limit)
        ).all()
    )


def _due_open_outcomes(
    s: Session, *, status: str, waiting: RunStatus, limit: int, branches: bool = False
) -> list[int]:
    """Unresolved ``status`` outcomes of the command a ``waiting`` or cancelling run waits on,
    whose next check is due (never checked first); with ``branches``, also those of a
    parallel step's calls, whatever the run does now (their effect must be known all the
    same)."""
    waited = and_(
        Run.active_command_id == OutcomeRow.command_id,
        Run.status.in_([waiting.value, RunStatus.CANCELLING.value]),
    )
    if branches:
        branch_ids = select(Command.id).where(Command.run_id == Run.id, Command.branch > 0)
        waited = or_(waited, OutcomeRow.command_id.in_(branch_ids))
    return list(
        s.scalars(
            select(OutcomeRow.id)
            .join(Run, Run.id == OutcomeRow.run_id)
            .where(
                waited,
                OutcomeRow.status == status,
                OutcomeRow.resolved_status.is_(None),
                (OutcomeRow.next_reconcile_at.is_(None))
                | (OutcomeRow.next_reconcile_at <= func.now()),
            )
            .order_by(OutcomeRow.next_reconcile_at.nulls_first())
            .limit(limit)
        ).all()
    )


def due_unknown_outcomes(s: Session, *, limit: int) -> list[int]:
    """Unresolved ``unknown`` outcomes a reconciling or cancelling run waits on, and those of
    parallel steps' calls, due."""
    return _due_open_outcomes(
        s, status="unknown", waiting=RunStatus.RECONCILING, limit=limit, branches=True
    )


def due_accepted_outcomes(s: Session, *, limit: int) -> list[int]:
    """Unsettled ``accepted`` outcomes (long-running jobs) a waiting or cancelling run waits
    on, or a parallel step's calls' (sub-runs), whose next poll is due."""
    return _due_open_outcomes(
        s, status="accepted", waiting=RunStatus.WAITING_JOB, limit=limit, branches=True
    )


def job_cancel_asked_at(s: Session, command_id: str) -> int | None:
    """The poll count at which a cancel of the command's job was requested (None: never)."""
    return s.scalar(
        select(Reconciliation.attempt).where(
            Reconciliation.command_id == command_id, Reconciliation.result == "cancel_requested"
        )
    )


def lock_unresolved(s: Session, outcome_id: int) -> tuple[OutcomeRow, Run, Command] | None:
    """The outcome, its run and its command, locked — if the outcome is still unresolved and
    still the one its run waits on (or a parallel step's call's)."""
    outcome = s.get(OutcomeRow, outcome_id, with_for_update=True)
    if outcome is None or outcome.resolved_status is not None:
        return None
    run = s.get(Run, outcome.run_id, with_for_update=True)
    if run is None:
        return None
    cmd = s.get(Command, outcome.command_id, with_for_update=True)
    if cmd is None or (run.active_command_id != outcome.command_id and not cmd.branch):
        return None
    return outcome, run, cmd


def attempt_may_run(
    s: Session, cmd: Command, *, limit_s: float, heartbeat_timeout_s: float
) -> datetime | None:
    """When ``cmd``'s current attempt can no longer be running, if that is still ahead by the
    database's clock (None if it has passed): ``limit_s`` after its start (its hard time
    limit) on prefork; ``heartbeat_timeout_s`` after its last heartbeat on a threads pool
    (its worker ends itself before then)."""
    if cmd.heartbeat_at is not None:
        end = cmd.heartbeat_at + timedelta(seconds=heartbeat_timeout_s)
        return end if s.scalar(select(func.now() < end)) else None
    if cmd.started_at is None:
        return None
    end = cmd.started_at + timedelta(seconds=limit_s)
    return end if s.scalar(select(func.now() < end)) else None


def stalled_runs(s: Session, *, older_than_s: float, limit: int) -> list[str]:
    """``running`` runs with no progress for ``older_than_s``, oldest first. A run waiting
    (a planner's ``wait``, while at the wait's step) counts from its wake time: it is not
    stalled before it, and is re-published after it if its delayed message was lost."""
    cutoff = func.now() - timedelta(seconds=older_than_s)
    waking = case(
        (
            Run.waiting["step"].as_integer() == Run.step,
            func.to_timestamp(Run.waiting["wake_at"].as_float()),
        ),
        else_=None,
    )
    quiet_since = func.greatest(Run.updated_at, waking)
    return list(
        s.scalars(
            select(Run.id)
            .where(
                Run.status == RunStatus.RUNNING.value,
                Run.updated_at < cutoff,
                quiet_since < cutoff,
            )
            .order_by(quiet_since)
            .limit(limit)
        ).all()
    )


def quiet_since(run: Run) -> float:
    """Since when (epoch seconds) ``run`` has made no progress: its last change, or the wake
    time of the wait it holds at its version (see :func:`stalled_runs`)."""
    since = run.updated_at.timestamp()
    waiting = run.waiting or {}
    if waiting.get("step") == run.step and waiting.get("wake_at") is not None:
        since = max(since, float(waiting["wake_at"]))
    return since


def run_trace_id(s: Session, run_id: str) -> str | None:
    """The trace id recorded at the run's start (None: untraced or no such run), so what the
    reconciler re-publishes continues the run's trace."""
    return s.scalar(select(Run.trace_id).where(Run.id == run_id))


def touch_run(s: Session, run_id: str) -> None:
    """Mark the run as progressed now (without a version change)."""
    s.execute(update(Run).where(Run.id == run_id).values(updated_at=func.now()))


def waiting_confirmations(s: Session, *, limit: int) -> list[Any]:
    """(run id, confirmation request, run deadline) of runs waiting for a confirmation,
    the longest-waiting first."""
    return list(
        s.execute(
            select(Run.id, Proposal.confirmation_request, Run.deadline_at)
            .join(Proposal, Proposal.id == Run.pending_proposal_id)
            .where(Run.status == RunStatus.WAITING_CONFIRMATION.value)
            .order_by(Run.updated_at)
            .limit(limit)
        ).all()
    )


def waiting_grants_due(s: Session, *, now: float, limit: int) -> list[str]:
    """Ids of runs waiting for a grant whose deadline has passed at ``now``, oldest first."""
    cutoff = datetime.fromtimestamp(now, tz=UTC)
    return list(
        s.scalars(
            select(Run.id)
            .where(Run.status == RunStatus.WAITING_GRANT.value, Run.deadline_at <= cutoff)
            .order_by(Run.deadline_at)
            .limit(limit)
        ).all()
    )
