"""The fake payment service's slower half: refunds that settle later, and batch payouts.

``start_refund_job`` answers at once with a job id (the same one for the same idempotency
key); the job settles ``SETTLE_AFTER_S`` later, when it is next asked about, unless a fault
says otherwise. Faults (set with ``DemoService.set_fault("refund_async", mode)``), consumed
when the job is created:

``slow_settle``   the job settles ``delay_s`` after its creation
``settle_fail``   the job ends failed (no refund)
``never_settle``  the job stays pending until it is cancelled

``payout`` pays one item of a batch, keyed by that item's own idempotency key; the call
faults of :mod:`warrant_demo.service` apply per item (``transient`` with ``times=2``
fails the first two items a batch sends).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

__all__ = ["SETTLE_AFTER_S", "SETTLE_FAULTS", "JobsService"]

#: How long after its creation a refund job settles (unless a fault says otherwise).
SETTLE_AFTER_S = 1.0
SETTLE_FAULTS = ("slow_settle", "settle_fail", "never_settle")

metadata = MetaData()

refund_jobs = Table(
    "demo_refund_jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("order_id", String(100), nullable=False),
    Column("amount_cents", Integer, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("status", String(16), nullable=False, server_default="pending"),
    Column("fault", String(32)),
    Column("settle_at", DateTime(timezone=True), nullable=False),
    Column("polls", Integer, nullable=False, server_default="0"),
    Column("cancels", Integer, nullable=False, server_default="0"),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
reversals = Table(
    "demo_refund_reversals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("calls", Integer, nullable=False, server_default="1"),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
payouts = Table(
    "demo_payouts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("recipient", String(200), nullable=False),
    Column("amount_cents", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)


class JobsService:
    """Mixed into :class:`~warrant_demo.service.DemoService` (its engine and faults)."""

    engine: Engine
    if TYPE_CHECKING:  # DemoService's

        def _take_fault(self, tool: str, modes: tuple[str, ...] | None = None) -> Any: ...
        def _before(
            self, tool: str, key: str | None, is_cancelled: Any, *, stored: Any = None
        ) -> Any: ...
        @staticmethod
        def _after_commit(fault: Any, what: str) -> None: ...

    def _jobs_schema(self) -> None:
        metadata.create_all(self.engine)

    # --- asynchronous refunds ---------------------------------------------------------------

    def start_refund_job(
        self, *, key: str, order_id: str, amount_cents: int, currency: str, is_cancelled: Any
    ) -> dict[str, Any]:
        fault = self._before("refund_async", key, is_cancelled)
        settle = self._take_fault("refund_async", SETTLE_FAULTS)
        delay = settle.delay_s if settle is not None and settle.mode == "slow_settle" else None
        after = SETTLE_AFTER_S if delay is None else delay
        values = {
            "idempotency_key": key,
            "order_id": order_id,
            "amount_cents": amount_cents,
            "currency": currency,
            "fault": settle.mode if settle is not None else None,
            "settle_at": func.now() + func.make_interval(0, 0, 0, 0, 0, 0, after),
        }
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(refund_jobs)
                .values(**values)
                .on_conflict_do_nothing(index_elements=[refund_jobs.c.idempotency_key])
            )
            row = conn.execute(
                select(refund_jobs).where(refund_jobs.c.idempotency_key == key)
            ).one()
        self._after_commit(fault, "refund job")
        return {"job_id": f"rj_{row.id}", "status": row.status}

    def refund_job(self, job_id: str) -> dict[str, Any]:
        """The job now (settling it if its time has come); unknown ids are ``missing``."""
        ident = _ident(job_id)
        with self.engine.begin() as conn:
            conn.execute(
                update(refund_jobs)
                .where(
                    refund_jobs.c.id == ident,
                    refund_jobs.c.status == "pending",
                    refund_jobs.c.settle_at <= func.now(),
                    refund_jobs.c.fault.is_distinct_from("never_settle"),
                )
                .values(
                    status=text("CASE WHEN fault = 'settle_fail' THEN 'failed' ELSE 'settled' END")
                )
            )
            row = conn.execute(
                update(refund_jobs)
                .where(refund_jobs.c.id == ident)
                .values(polls=refund_jobs.c.polls + 1)
                .returning(refund_jobs)
            ).first()
        if row is None:
            return {"job_id": job_id, "status": "missing"}
        return {
            "job_id": job_id,
            "status": row.status,
            "refund_id": f"re_j{row.id}",
            "order_id": row.order_id,
            "amount_cents": row.amount_cents,
            "currency": row.currency,
        }

    def refund_job_by_key(self, key: str) -> dict[str, Any] | None:
        self._jobs_schema()
        with self.engine.begin() as conn:
            q = select(refund_jobs.c.id).where(refund_jobs.c.idempotency_key == key)
            found = conn.execute(q).scalar()
        return None if found is None else {"job_id": f"rj_{found}"}

    def cancel_refund_job(self, job_id: str) -> str:
        """Ask the job to stop: a pending job is cancelled; every call is counted."""
        with self.engine.begin() as conn:
            conn.execute(
                update(refund_jobs)
                .where(refund_jobs.c.id == _ident(job_id))
                .values(
                    cancels=refund_jobs.c.cancels + 1,
                    status=text("CASE WHEN status = 'pending' THEN 'cancelled' ELSE status END"),
                )
            )
            found = conn.execute(
                select(refund_jobs.c.status).where(refund_jobs.c.id == _ident(job_id))
            ).scalar()
        return str(found or "missing")

    def refund_jobs_of(self, order_id: str) -> list[dict[str, Any]]:
        """Every job of an order: status, polls and cancel calls (what tests count)."""
        self._jobs_schema()
        with self.engine.begin() as conn:
            found = conn.execute(
                select(refund_jobs).where(refund_jobs.c.order_id == order_id)
            ).all()
        return [
            {"job_id": f"rj_{r.id}", "status": r.status, "polls": r.polls, "cancels": r.cancels}
            for r in found
        ]

    # --- reversals (a refund's compensation) -------------------------------------------------

    def reverse_refund(self, *, key: str) -> bool:
        """Reverse the refund made with ``key`` (once, however often asked; every ask is
        counted). False if there is no such refund."""
        if self.get_refund(key=key) is None:  # type: ignore[attr-defined]
            return False
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(reversals)
                .values(idempotency_key=key)
                .on_conflict_do_update(
                    index_elements=[reversals.c.idempotency_key],
                    set_={"calls": reversals.c.calls + 1},
                )
            )
        return True

    def reversals_of(self, *, key: str) -> tuple[int, int]:
        """(reversals, calls) made for the refund of ``key``."""
        self._jobs_schema()
        with self.engine.begin() as conn:
            row = conn.execute(
                select(reversals.c.calls).where(reversals.c.idempotency_key == key)
            ).first()
        return (0, 0) if row is None else (1, int(row.calls))

    # --- batch payouts ----------------------------------------------------------------------

    def payout(
        self, *, key: str, recipient: str, amount_cents: int, is_cancelled: Any
    ) -> dict[str, Any]:
        fault = self._before(
            "payout_batch", key, is_cancelled, stored=lambda: self.get_payout(key=key)
        )
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(payouts)
                .values(idempotency_key=key, recipient=recipient, amount_cents=amount_cents)
                .on_conflict_do_nothing(index_elements=[payouts.c.idempotency_key])
            )
            row = conn.execute(select(payouts).where(payouts.c.idempotency_key == key)).one()
        self._after_commit(fault, "payout")
        return {"payout_id": f"po_{row.id}", "recipient": row.recipient}

    def get_payout(self, *, key: str) -> dict[str, Any] | None:
        self._jobs_schema()
        with self.engine.begin() as conn:
            row = conn.execute(select(payouts).where(payouts.c.idempotency_key == key)).first()
        return None if row is None else {"payout_id": f"po_{row.id}", "recipient": row.recipient}

    def calls_with_key(self, key: str) -> int:
        """Calls the service received with this idempotency key (faulted ones included)."""
        return _calls_with_key(self.engine, key)

    def payouts_to(self, recipient: str) -> int:
        self._jobs_schema()
        with self.engine.begin() as conn:
            q = select(func.count()).select_from(payouts).where(payouts.c.recipient == recipient)
            return int(conn.execute(q).scalar_one())


def _calls_with_key(engine: Engine, key: str) -> int:
    with engine.begin() as conn:
        q = text("SELECT count(*) FROM demo_calls WHERE idempotency_key = :key")
        return int(conn.execute(q, {"key": key}).scalar_one())


def _ident(job_id: str) -> int:
    digits = job_id.removeprefix("rj_")
    return int(digits) if digits.isdigit() else -1
