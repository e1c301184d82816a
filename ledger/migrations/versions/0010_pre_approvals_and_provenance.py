"""pre_approvals: exact proposals approved ahead of time; proposals.provenance

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 04:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pre_approvals",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column(
            "run_id", sa.String(36), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("proposal_hash", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("tool_version", sa.String(50), nullable=False),
        sa.Column("arguments", postgresql.JSONB(), nullable=False),
        sa.Column("approved_by", sa.String(200), nullable=False),
        sa.Column(
            "approved_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("used_by_proposal", sa.String(200), nullable=True),
    )
    op.create_index("ix_pre_approvals_run", "pre_approvals", ["run_id", "proposal_hash"])
    op.add_column("proposals", sa.Column("provenance", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("proposals", "provenance")
    op.drop_index("ix_pre_approvals_run", table_name="pre_approvals")
    op.drop_table("pre_approvals")
