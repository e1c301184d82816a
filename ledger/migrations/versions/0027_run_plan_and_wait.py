"""runs: the planner's latest plan and the wait it asked for

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07 14:45:00.000000

``runs.plan``: the planner's latest plan (a ``kind: plan`` output: its nodes with their
dependencies, completion criteria and statuses, its open questions, ``revision`` and ``step``);
the model's own notes, shown back to it, never a trusted source. ``runs.waiting``: the wait a
planner's ``kind: wait`` output committed (``step``: the run step it holds for,
``wake_at``, ``until_at``, ``seconds`` or ``until`` and ``max_seconds``); the planner stage and
the stalled-run sweep read it. NULL for runs before this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("plan", JSONB(), nullable=True))
    op.add_column("runs", sa.Column("waiting", JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "waiting")
    op.drop_column("runs", "plan")
