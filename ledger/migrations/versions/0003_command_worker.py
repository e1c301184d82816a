"""command worker

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 23:01:13.147373
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("commands", sa.Column("worker", sa.String(length=200), nullable=True))


def downgrade() -> None:
    op.drop_column("commands", "worker")
