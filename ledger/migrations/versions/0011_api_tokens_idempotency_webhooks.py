"""api_tokens; runs.idempotency_key, spec_hash, started_by; webhook_deliveries

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _timestamp(name: str, *, now: bool = False) -> sa.Column:
    if now:
        return sa.Column(
            name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        )
    return sa.Column(name, sa.DateTime(timezone=True), nullable=True)


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_by", sa.String(200), nullable=False),
        _timestamp("created_at", now=True),
        _timestamp("revoked_at"),
        sa.Column("revoked_by", sa.String(200), nullable=True),
        _timestamp("last_used_at"),
    )
    op.add_column("runs", sa.Column("idempotency_key", sa.String(200), nullable=True))
    op.add_column("runs", sa.Column("spec_hash", sa.String(64), nullable=True))
    op.add_column("runs", sa.Column("started_by", sa.String(200), nullable=True))
    op.create_index(
        "uq_runs_idempotency_key",
        "runs",
        ["idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column(
            "run_id", sa.String(36), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("run_version", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("status", sa.String(16), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        _timestamp("next_attempt_at", now=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        _timestamp("created_at", now=True),
        _timestamp("delivered_at"),
        sa.UniqueConstraint("run_id", "run_version", "event", name="uq_webhook_deliveries_event"),
    )
    op.create_index(
        "ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("uq_runs_idempotency_key", table_name="runs")
    op.drop_column("runs", "started_by")
    op.drop_column("runs", "spec_hash")
    op.drop_column("runs", "idempotency_key")
    op.drop_table("api_tokens")
