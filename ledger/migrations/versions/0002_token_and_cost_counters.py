"""token and cost counters

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 22:43:08.311439
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("tokens_used", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column("runs", sa.Column("cost_used", sa.Float(), server_default="0", nullable=False))


def downgrade() -> None:
    op.drop_column("runs", "cost_used")
    op.drop_column("runs", "tokens_used")
