"""Webhook deliveries: the row a transition owes the producer, and the delivery sweep's queries.

A change that makes a run wait for a person (``waiting_confirmation``, ``needs_input``,
``handoff``: event ``waiting``) or end (``completed``, ``failed``, ``cancelled``: ``ended``),
or, for a run whose caller proposes, hands the next step back to it (``decided``),
inserts a ``pending`` delivery in the transition's own statement, only if the compare-and-set
won and the run's spec names a webhook (:func:`delivery_write`, added by
:func:`warrant.ledger.repo.commit`). The sweep then claims due rows (:func:`claim_due`) and
records each attempt (:func:`record_attempt`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import String, bindparam, case, func, literal_column, select, true, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from warrant.ledger.models import Proposal, Run, WebhookDelivery
from warrant.runner.codes import RunStatus

__all__ = [
    "DECIDED",
    "NOTIFY",
    "DueDelivery",
    "claim_due",
    "delivery_write",
    "notify_event",
    "record_attempt",
]

S = RunStatus
#: Statuses whose entry is told to the producer, and the event name it gets.
NOTIFY: dict[RunStatus, str] = {
    S.WAITING_CONFIRMATION: "waiting",
    S.WAITING_GRANT: "waiting",
    S.NEEDS_INPUT: "waiting",
    S.HANDOFF: "waiting",
    S.COMPLETED: "ended",
    S.FAILED: "ended",
    S.CANCELLED: "ended",
}

#: For a run whose caller proposes (planner kind ``external``): its proposal was decided and
#: the run goes on without a person (refused, executed, its effect unknown or reconciled).
DECIDED = "decided"

_RUNS: Any = Run.__table__
_DELIVERIES: Any = WebhookDelivery.__table__


def notify_event(source: RunStatus, target: RunStatus) -> str | None:
    """The webhook event a change from ``source`` to ``target`` owes, if any (a change that
    keeps the status, such as a late fact recorded on an ended run, owes none)."""
    return None if source is target else NOTIFY.get(target)


def _decided(source: RunStatus, target: RunStatus, phase: Any) -> bool:
    """A change that hands the step back to a caller that proposes: back to planning from the
    gate or a tool (or after reconciliation), or into reconciliation."""
    if target in (S.RECONCILING, S.WAITING_JOB):
        return source is S.RUNNING
    back = (S.RUNNING, S.RECONCILING, S.WAITING_JOB)
    return target is S.RUNNING and phase == "planning" and source in back


def _build_insert(cas: Any, *, external_only: bool = False) -> Any:
    """``INSERT ... SELECT`` of one pending delivery at the CAS's new version, if the run's
    spec has a webhook URL (and, for ``decided``, its planner kind is ``external``); a second
    one for the same (run, version, event) is not inserted."""
    url = _RUNS.c.spec["webhook"]["url"].astext
    rows = (
        select(
            _RUNS.c.id,
            cas.c.version,
            bindparam("wh_event", type_=String),
            url,
            literal_column("'pending'"),
            literal_column("0"),
            func.now(),
        )
        .select_from(_RUNS.join(cas, true()))
        .where(_RUNS.c.id == bindparam("cas_run", type_=String), url.is_not(None))
    )
    if external_only:
        rows = rows.where(_RUNS.c.spec["planner"]["kind"].astext == "external")
    columns = ["run_id", "run_version", "event", "url", "status", "attempts", "next_attempt_at"]
    return (
        insert(_DELIVERIES)
        .from_select(columns, rows, include_defaults=False)
        .on_conflict_do_nothing(index_elements=["run_id", "run_version", "event"])
    )


def _build_decided(cas: Any) -> Any:
    return _build_insert(cas, external_only=True)


def delivery_write(
    source: RunStatus, target: RunStatus, *, phase: Any = None
) -> tuple[str, Callable[[Any], Any], dict[str, Any]] | None:
    """The guarded write (shape, builder, parameters: the fields of a
    :class:`~warrant.ledger.repo.Guarded`) a change from ``source`` to ``target`` (into
    ``phase``) adds to its transition, or None when it owes no webhook."""
    event = notify_event(source, target)
    if event is not None:
        return "webhook.insert", _build_insert, {"wh_event": event}
    if _decided(source, target, phase):
        return "webhook.insert.decided", _build_decided, {"wh_event": DECIDED}
    return None


@dataclass(frozen=True)
class DueDelivery:
    """A claimed delivery and what its call reports of the run (as it is now)."""

    id: int
    run_id: str
    run_version: int
    event: str
    url: str
    attempts: int
    """Attempts before this one."""
    step: int
    status: str
    stop_reason: str | None
    answer: str | None
    confirmation_request: dict[str, Any] | None


def claim_due(s: Session, *, limit: int, lease_s: float) -> list[DueDelivery]:
    """Up to ``limit`` pending deliveries whose next attempt is due, oldest first, locked
    (``SKIP LOCKED``: rows another sweep holds are left to it) and pushed ``lease_s`` ahead,
    so a sweep that dies while sending leaves them due again after the lease."""
    rows = s.execute(
        select(
            WebhookDelivery.id,
            WebhookDelivery.run_id,
            WebhookDelivery.run_version,
            WebhookDelivery.event,
            WebhookDelivery.url,
            WebhookDelivery.attempts,
            Run.step,
            Run.status,
            Run.stop_reason,
            Run.answer,
            Proposal.confirmation_request,
        )
        .join(Run, Run.id == WebhookDelivery.run_id)
        .outerjoin(Proposal, Proposal.id == Run.pending_proposal_id)
        .where(
            WebhookDelivery.status == literal_column("'pending'"),
            WebhookDelivery.next_attempt_at <= func.now(),
        )
        .order_by(WebhookDelivery.next_attempt_at)
        .limit(limit)
        .with_for_update(of=WebhookDelivery, skip_locked=True)
    ).all()
    if not rows:
        return []
    s.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id.in_([r.id for r in rows]))
        .values(next_attempt_at=func.now() + timedelta(seconds=lease_s))
    )
    waiting = RunStatus.WAITING_CONFIRMATION.value
    return [
        DueDelivery(
            id=r.id,
            run_id=r.run_id,
            run_version=r.run_version,
            event=r.event,
            url=r.url,
            attempts=r.attempts,
            step=r.step,
            status=r.status,
            stop_reason=r.stop_reason,
            answer=r.answer,
            confirmation_request=r.confirmation_request if r.status == waiting else None,
        )
        for r in rows
    ]


def record_attempt(
    s: Session,
    delivery_id: int,
    *,
    ok: bool,
    status_code: int | None,
    error: str | None,
    max_attempts: int,
    retry_in_s: float,
) -> tuple[str, int] | None:
    """Record one attempt of a pending delivery: ``delivered``; or, failed, ``pending`` again
    in ``retry_in_s`` — ``failed`` once it has had ``max_attempts``. Returns (status,
    attempts), or None if the row is no longer pending."""
    d = WebhookDelivery
    attempts = d.attempts + 1
    if ok:
        values: dict[str, Any] = {"status": "delivered", "delivered_at": func.now()}
    else:
        values = {
            "status": case((attempts >= max_attempts, "failed"), else_="pending"),
            "next_attempt_at": func.now() + timedelta(seconds=retry_in_s),
        }
    row = s.execute(
        update(d)
        .where(d.id == delivery_id, d.status == "pending")
        .values(attempts=attempts, last_status=status_code, last_error=error, **values)
        .returning(d.status, d.attempts)
    ).first()
    return None if row is None else (str(row[0]), int(row[1]))
