"""commands: the heartbeat of an attempt that no pool time limit ends

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 19:20:00.000000

A tool attempt on a threads-pool worker cannot be killed by a pool's hard time limit, so its
lease is not "started_at + time limit": its worker renews ``heartbeat_at`` while it runs
(``broker.tool._attempt_watch``), and the attempt is presumed lost only once the heartbeat is older
than ``WARRANT_LEASE_HEARTBEAT_TIMEOUT_S``. NULL for an attempt on a prefork pool (its lease
is still its hard time limit plus the margin).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("commands", sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("commands", "heartbeat_at")
