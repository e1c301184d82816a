"""The HTTP API's tables (migration 0011): API tokens with roles, and the webhook deliveries
of run events; and the prune batches' anchors (migration 0018). Re-exported by
:mod:`warrant.ledger.models`."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from warrant.ledger.model_base import Base, created_now

__all__ = ["ApiToken", "LedgerAnchor", "WebhookDelivery"]


class ApiToken(Base):
    """A bearer token of the HTTP API. Only the sha256 (hex) of the token is kept; ``role`` is
    a :class:`warrant.runner.authz.Role`. A revoked token is kept (``revoked_at``)."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = created_now()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_by: Mapped[str | None] = mapped_column(String(200))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """Set when the token authenticates (at most once a minute)."""


class WebhookDelivery(Base):
    """One webhook call owed for a run event (``waiting`` or ``ended``) at one run version:
    at most one row per (run, version, event); retried until ``delivered`` or ``failed``."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    run_version: Mapped[int] = mapped_column(Integer)
    event: Mapped[str] = mapped_column(String(32))
    url: Mapped[str] = mapped_column(String(2000))
    status: Mapped[str] = mapped_column(String(16), default="pending", server_default="pending")
    """``pending``, ``delivered`` or ``failed``."""
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_attempt_at: Mapped[datetime] = created_now()
    last_status: Mapped[int | None] = mapped_column(Integer)
    """The HTTP status of the last attempt (none if it got no response)."""
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = created_now()
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("run_id", "run_version", "event", name="uq_webhook_deliveries_event"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
    )


class LedgerAnchor(Base):
    """One prune batch (migration 0018): ``heads`` is ``[[run_id, last_seq, final_hash], …]``
    of the runs it removed, sorted by run id, and ``anchor_hash`` the hash over them
    (:func:`warrant.ledger.chain.anchor_hash`). Append-only."""

    __tablename__ = "ledger_anchors"

    batch_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = created_now()
    runs: Mapped[int] = mapped_column(Integer)
    heads: Mapped[list[list[object]]] = mapped_column(JSONB)
    anchor_hash: Mapped[str] = mapped_column(String(64))
