"""A fake external payment and drafts service, with fault injection.

It is what the demo tools call: a real implementation with its own tables (not the ledger's),
honouring idempotency keys the way payment APIs do — the same key with the same parameters
returns the same refund, the same key with other parameters is an error — and answering a
status query by key. Its faults (:mod:`warrant_demo.service_faults`) are switched on
per tool and consumed atomically, so tests and the demo can inject them into worker processes.

Refunds that settle later and batch payouts: :mod:`warrant_demo.service_jobs`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    insert,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from warrant.runner.errors import ToolFailed, ToolUnknown
from warrant_demo.service_faults import (
    FAULT_MODES,
    Fault,
    FaultsService,
    OnInterrupt,
    calls,
    served,
)
from warrant_demo.service_jobs import JobsService

__all__ = ["FAULT_MODES", "DemoService", "Fault", "IdempotencyConflict", "calls"]

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


class IdempotencyConflict(ToolFailed):
    """The key was used before with other parameters (never retryable)."""

    code = "IDEMPOTENCY_KEY_REUSED"


def _hash(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


class DemoService(FaultsService, JobsService):
    """The external system. ``engine`` points at its own database (may share the server)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._ready = False

    def ensure_schema(self) -> None:
        if not self._ready:
            metadata.create_all(self.engine)
            self._faults_schema()
            self._jobs_schema()
            self._ready = True

    # --- payments --------------------------------------------------------------------------

    @served
    def issue_refund(
        self,
        *,
        key: str,
        order_id: str,
        amount_cents: int,
        currency: str,
        is_cancelled: Callable[..., bool] = lambda **_: False,
        on_interrupt: OnInterrupt | None = None,
    ) -> dict[str, Any]:
        fault = self._before(
            "issue_refund", key, is_cancelled, on_interrupt, stored=lambda: self.get_refund(key=key)
        )
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

    @served
    def save_draft(
        self,
        *,
        key: str,
        draft_id: str,
        content: str,
        is_cancelled: Callable[..., bool] = lambda **_: False,
        on_interrupt: OnInterrupt | None = None,
    ) -> dict[str, Any]:
        fault = self._before(
            "save_draft", key, is_cancelled, on_interrupt, stored=lambda: self.get_draft(key=key)
        )
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

    @served
    def send_notice(
        self,
        *,
        recipient: str,
        body: str,
        is_cancelled: Callable[..., bool] = lambda **_: False,
        on_interrupt: OnInterrupt | None = None,
    ) -> dict[str, Any]:
        """Irreversible, no idempotency key and no status query: nothing can reconcile it."""
        fault = self._before("send_notice", None, is_cancelled, on_interrupt)
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

    @served
    def lookup(
        self,
        *,
        query: str,
        is_cancelled: Callable[..., bool] = lambda **_: False,
        on_interrupt: OnInterrupt | None = None,
    ) -> dict[str, Any]:
        fault = self._before("lookup", None, is_cancelled, on_interrupt)
        if fault is not None and fault.mode == "timeout_after_commit":
            raise ToolUnknown("the response was lost", code="SERVICE_TIMEOUT")
        digest = hashlib.sha256(query.encode()).hexdigest()[:8]
        return {"query": query, "observation": f"record-{digest}"}
