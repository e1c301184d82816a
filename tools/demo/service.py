"""A fake external payment and drafts service, with fault injection.

It is what the demo tools call: a real implementation with its own tables (not the ledger's),
honouring idempotency keys the way payment APIs do — the same key with the same parameters
returns the same refund, the same key with other parameters is an error — and answering a
status query by key. Faults are switched on per tool and consumed atomically, so tests and
the demo can inject them into worker processes:

``slow``                   sleep ``delay_s`` (checking for cancellation) before acting
``transient``              fail retryably, with ``retry_after_s``
``timeout_before_commit``  the call times out and nothing was written
``timeout_after_commit``   the effect is committed, then the response is lost
``slow_after_commit``      the effect is committed, then the call hangs ``delay_s``
``corrupt_read``           a later read-back returns other content (postcondition tests)
``reject``                 a business refusal (``ToolRejected``)
``fail``                   a known, permanent failure, e.g. a missing resource
``crash``                  an unclassified exception (a bug in the adapter)

Refunds that settle later and batch payouts: :mod:`warrant.tools.demo.service_jobs`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from warrant.runner.errors import ToolFailed, ToolRejected, ToolUnknown
from warrant.tools.demo.service_jobs import SETTLE_FAULTS, JobsService

__all__ = ["FAULT_MODES", "DemoService", "Fault", "IdempotencyConflict"]

FAULT_MODES = (
    "slow",
    "transient",
    "timeout_before_commit",
    "timeout_after_commit",
    "slow_after_commit",
    "corrupt_read",
    "reject",
    "fail",
    "crash",
    *SETTLE_FAULTS,
)
#: The modes consumed before the call acts (``corrupt_read`` is consumed by read-backs, the
#: settle faults by a refund job's creation: ``warrant.tools.demo.service_jobs``).
CALL_FAULTS = tuple(m for m in FAULT_MODES if m != "corrupt_read" and m not in SETTLE_FAULTS)

metadata = MetaData()

refunds = Table(
    "demo_refunds",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("request_hash", String(64), nullable=False),
    Column("order_id", String(100), nullable=False),
    Column("amount_cents", Integer, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
drafts = Table(
    "demo_drafts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("draft_id", String(100), nullable=False),
    Column("content", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
notices = Table(
    "demo_notices",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("recipient", String(200), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
faults = Table(
    "demo_faults",
    metadata,
    Column("tool", String(100), primary_key=True),
    Column("mode", String(32), nullable=False),
    Column("remaining", Integer, nullable=False),
    Column("delay_s", Float, nullable=False, server_default="0"),
    Column("retry_after_s", Float),
)
calls = Table(
    "demo_calls",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tool", String(100), nullable=False),
    Column("idempotency_key", String(128)),
    Column("fault", String(32)),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)


class IdempotencyConflict(ToolFailed):
    """The key was used before with other parameters (never retryable)."""

    code = "IDEMPOTENCY_KEY_REUSED"


@dataclass(frozen=True)
class Fault:
    mode: str
    delay_s: float = 0.0
    retry_after_s: float | None = None


def _hash(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


def _known_cancelled(is_cancelled: Callable[..., bool]) -> bool:
    """Is the run cancelled (asked of the ledger)? The cancel's own interruption may land
    while this asks: it is delivered once, so asking again gets the answer."""
    try:
        return bool(is_cancelled(fresh=True))
    except Exception:
        return bool(is_cancelled(fresh=True))


class DemoService(JobsService):
    """The external system. ``engine`` points at its own database (may share the server)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._ready = False

    def ensure_schema(self) -> None:
        if not self._ready:
            metadata.create_all(self.engine)
            self._jobs_schema()
            self._ready = True

    # --- fault injection -------------------------------------------------------------------

    def set_fault(
        self,
        tool: str,
        mode: str,
        *,
        times: int = 1,
        delay_s: float = 0.0,
        retry_after_s: float | None = None,
    ) -> None:
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}; one of {', '.join(FAULT_MODES)}")
        self.ensure_schema()
        values = {
            "tool": tool,
            "mode": mode,
            "remaining": times,
            "delay_s": delay_s,
            "retry_after_s": retry_after_s,
        }
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(faults)
                .values(**values)
                .on_conflict_do_update(index_elements=[faults.c.tool], set_=values)
            )

    def clear_faults(self) -> None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            conn.execute(delete(faults))

    def _take_fault(self, tool: str, modes: tuple[str, ...] | None = None) -> Fault | None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            q = update(faults).where(faults.c.tool == tool, faults.c.remaining > 0)
            if modes:
                q = q.where(faults.c.mode.in_(modes))
            row = conn.execute(
                q.values(remaining=faults.c.remaining - 1).returning(
                    faults.c.mode, faults.c.delay_s, faults.c.retry_after_s
                )
            ).first()
        return Fault(row[0], row[1], row[2]) if row else None

    def _before(
        self, tool: str, key: str | None, is_cancelled: Callable[..., bool]
    ) -> Fault | None:
        try:
            fault = self._take_fault(tool, CALL_FAULTS)
            with self.engine.begin() as conn:
                conn.execute(
                    insert(calls).values(
                        tool=tool, idempotency_key=key, fault=fault.mode if fault else None
                    )
                )
            if fault is not None and fault.mode == "slow":
                end = time.monotonic() + fault.delay_s
                while time.monotonic() < end and not is_cancelled():
                    time.sleep(min(0.05, max(0.0, end - time.monotonic())))
        except Exception:
            # Interrupted (a revoke, a time limit) anywhere before the request was sent —
            # also while the call was being logged: if the run was cancelled, this call is
            # known not to have taken effect.
            if not _known_cancelled(is_cancelled):
                raise
            raise ToolFailed("cancelled before the write", code="CANCELLED_BEFORE_WRITE") from None
        if fault is None:
            return None
        if fault.mode == "slow" and _known_cancelled(is_cancelled):
            raise ToolFailed("cancelled before the write", code="CANCELLED_BEFORE_WRITE")
        if fault.mode == "reject":
            raise ToolRejected("the service refused the request", code="REQUEST_REFUSED")
        if fault.mode == "fail":
            raise ToolFailed("no such resource", code="RESOURCE_NOT_FOUND")
        if fault.mode == "crash":
            raise RuntimeError("adapter bug")
        if fault.mode == "transient":
            raise ToolFailed(
                "service temporarily unavailable",
                code="SERVICE_UNAVAILABLE",
                retryable=True,
                retry_after_s=fault.retry_after_s,
            )
        if fault.mode == "timeout_before_commit":
            raise ToolUnknown("timed out waiting for the service", code="SERVICE_TIMEOUT")
        return fault

    @staticmethod
    def _after_commit(fault: Fault | None, what: str) -> None:
        if fault is None:
            return
        if fault.mode == "slow_after_commit":
            time.sleep(fault.delay_s)
        if fault.mode == "timeout_after_commit":
            raise ToolUnknown(
                f"the response was lost after the {what} was committed", code="SERVICE_TIMEOUT"
            )

    # --- payments --------------------------------------------------------------------------

    def issue_refund(
        self,
        *,
        key: str,
        order_id: str,
        amount_cents: int,
        currency: str,
        is_cancelled: Callable[..., bool] = lambda **_: False,
    ) -> dict[str, Any]:
        fault = self._before("issue_refund", key, is_cancelled)
        params = {"order_id": order_id, "amount_cents": amount_cents, "currency": currency}
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(refunds)
                .values(
                    idempotency_key=key,
                    request_hash=_hash(params),
                    **params,
                )
                .on_conflict_do_nothing(index_elements=[refunds.c.idempotency_key])
            )
            row = conn.execute(select(refunds).where(refunds.c.idempotency_key == key)).one()
        if row.request_hash != _hash(params):
            raise IdempotencyConflict("idempotency key reused with other parameters")
        self._after_commit(fault, "refund")
        return {
            "refund_id": f"re_{row.id}",
            "order_id": row.order_id,
            "amount_cents": row.amount_cents,
            "currency": row.currency,
        }

    def get_refund(self, *, key: str) -> dict[str, Any] | None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            row = conn.execute(select(refunds).where(refunds.c.idempotency_key == key)).first()
        if row is None:
            return None
        return {
            "refund_id": f"re_{row.id}",
            "order_id": row.order_id,
            "amount_cents": row.amount_cents,
            "currency": row.currency,
        }

    def refund_count(self, *, order_id: str | None = None) -> int:
        self.ensure_schema()
        q = select(func.count()).select_from(refunds)
        if order_id:
            q = q.where(refunds.c.order_id == order_id)
        with self.engine.begin() as conn:
            return int(conn.execute(q).scalar_one())

    # --- drafts and lookup -----------------------------------------------------------------

    def save_draft(
        self,
        *,
        key: str,
        draft_id: str,
        content: str,
        is_cancelled: Callable[..., bool] = lambda **_: False,
    ) -> dict[str, Any]:
        fault = self._before("save_draft", key, is_cancelled)
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(drafts)
                .values(
                    idempotency_key=key,
                    draft_id=draft_id,
                    content=content,
                )
                .on_conflict_do_nothing(index_elements=[drafts.c.idempotency_key])
            )
        self._after_commit(fault, "draft")
        return {"draft_id": draft_id, "chars": len(content)}

    def get_draft(self, *, key: str) -> dict[str, Any] | None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            row = conn.execute(select(drafts).where(drafts.c.idempotency_key == key)).first()
        return None if row is None else {"draft_id": row.draft_id, "chars": len(row.content)}

    def draft_count(self, *, draft_id: str | None = None) -> int:
        self.ensure_schema()
        q = select(func.count()).select_from(drafts)
        if draft_id:
            q = q.where(drafts.c.draft_id == draft_id)
        with self.engine.begin() as conn:
            return int(conn.execute(q).scalar_one())

    def send_notice(
        self, *, recipient: str, body: str, is_cancelled: Callable[..., bool] = lambda **_: False
    ) -> dict[str, Any]:
        """Irreversible, no idempotency key and no status query: nothing can reconcile it."""
        fault = self._before("send_notice", None, is_cancelled)
        with self.engine.begin() as conn:
            conn.execute(insert(notices).values(recipient=recipient, body=body))
        self._after_commit(fault, "notice")
        return {"recipient": recipient, "chars": len(body)}

    def notice_count(self, *, recipient: str) -> int:
        self.ensure_schema()
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(notices)
                    .where(notices.c.recipient == recipient)
                ).scalar_one()
            )

    def lookup(
        self, *, query: str, is_cancelled: Callable[..., bool] = lambda **_: False
    ) -> dict[str, Any]:
        fault = self._before("lookup", None, is_cancelled)
        if fault is not None and fault.mode == "timeout_after_commit":
            raise ToolUnknown("the response was lost", code="SERVICE_TIMEOUT")
        digest = hashlib.sha256(query.encode()).hexdigest()[:8]
        return {"query": query, "observation": f"record-{digest}"}

    def call_count(self, tool: str) -> int:
        self.ensure_schema()
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    select(func.count()).select_from(calls).where(calls.c.tool == tool)
                ).scalar_one()
            )

    def corrupt_read(self, tool: str) -> bool:
        """Consume a ``corrupt_read`` fault for ``tool`` if one is set."""
        return self._take_fault(tool, ("corrupt_read",)) is not None
