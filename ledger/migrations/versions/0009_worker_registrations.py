"""worker_registrations: each running worker's tool set (registry fingerprint)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 21:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "worker_registrations",
        sa.Column("node", sa.String(255), primary_key=True),
        sa.Column("roles", postgresql.JSONB(), nullable=False),
        sa.Column("queues", postgresql.JSONB(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("tools", postgresql.JSONB(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column(
            "started_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "seen_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )


def downgrade() -> None:
    op.drop_table("worker_registrations")
