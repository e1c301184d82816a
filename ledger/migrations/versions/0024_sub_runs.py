"""sub-runs: a run's parent and what its spawn reserved from the parent

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 11:00:00.000000

``runs.parent_run_id``: the run whose ``delegate`` call started this one (``NULL``: a run a
producer started). ``runs.delegation``: the spawn's terms as the child's row keeps them (the
parent's command, the budgets and grant uses reserved from the parent, and once the child has
ended and the unused rest went back, ``settled`` with the output the parent observed).
``runs.model_calls_delegated``: of a run's ``model_calls``, those its sub-runs hold (reserved, or
used once they ended); the run's own calls are the rest.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs",
        sa.Column(
            "parent_run_id",
            sa.String(36),
            sa.ForeignKey("runs.id", ondelete="SET NULL"),
            nullable=True,
        ),
    )
    op.add_column("runs", sa.Column("delegation", postgresql.JSONB(), nullable=True))
    op.add_column(
        "runs",
        sa.Column("model_calls_delegated", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index(
        "ix_runs_parent",
        "runs",
        ["parent_run_id"],
        postgresql_where=sa.text("parent_run_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_parent", table_name="runs")
    op.drop_column("runs", "model_calls_delegated")
    op.drop_column("runs", "delegation")
    op.drop_column("runs", "parent_run_id")
