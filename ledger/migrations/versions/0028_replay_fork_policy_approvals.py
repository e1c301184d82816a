"""runs: a replay's or a fork's source; policy_approvals: the policies an operator approved

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 17:30:00.000000

``runs.kind``: ``live`` (a producer's or a delegation's run), ``replay`` (a finished run's
recorded proposals re-decided by today's gate: never executes anything) or ``fork`` (a new
live run that starts from a source run's observations up to a step). ``runs.source_run_id``,
``runs.source_step``: the run a replay or fork came from, and the step a fork starts at.
``policy_approvals``: each policy version (the deployment's policy hash) an operator approved
(``WARRANT_POLICY_APPROVAL=required``), by whom, when, and the policy's form at approval.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("kind", sa.String(16), nullable=False, server_default="live"))
    op.add_column(
        "runs",
        sa.Column(
            "source_run_id",
            sa.String(36),
            sa.ForeignKey("runs.id", ondelete="SET NULL"),
            nullable=True,
        ),
    )
    op.add_column("runs", sa.Column("source_step", sa.Integer(), nullable=True))
    op.create_index(
        "ix_runs_source",
        "runs",
        ["source_run_id"],
        postgresql_where=sa.text("source_run_id IS NOT NULL"),
    )
    op.create_table(
        "policy_approvals",
        sa.Column("policy_hash", sa.String(64), primary_key=True),
        sa.Column("approved_by", sa.String(200), nullable=False),
        sa.Column(
            "approved_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column("form", JSONB(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("policy_approvals")
    op.drop_index("ix_runs_source", table_name="runs")
    op.drop_column("runs", "source_step")
    op.drop_column("runs", "source_run_id")
    op.drop_column("runs", "kind")
