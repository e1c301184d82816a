"""reconciliation and handoff

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 23:20:06.078564
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "handoffs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column(
            "bundle", postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), nullable=False
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_by", sa.String(length=200), nullable=True),
        sa.Column("resolution", sa.String(length=16), nullable=True),
        sa.Column("resolution_reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_handoffs_open", "handoffs", ["resolved_at"], unique=False)
    op.create_index(op.f("ix_handoffs_run_id"), "handoffs", ["run_id"], unique=False)
    op.create_table(
        "reconciliations",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("command_id", sa.String(length=36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column(
            "detail", postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), nullable=True
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(["command_id"], ["commands.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_reconciliations_run_id"), "reconciliations", ["run_id"], unique=False)
    op.add_column("outcomes", sa.Column("resolved_status", sa.String(length=16), nullable=True))
    op.add_column("outcomes", sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "outcomes",
        sa.Column("reconcile_attempts", sa.Integer(), server_default="0", nullable=False),
    )
    op.add_column(
        "outcomes", sa.Column("next_reconcile_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.drop_constraint(op.f("outcomes_command_id_key"), "outcomes", type_="unique")
    op.create_unique_constraint(
        "uq_outcomes_command_attempt", "outcomes", ["command_id", "attempt"]
    )


def downgrade() -> None:
    op.drop_constraint("uq_outcomes_command_attempt", "outcomes", type_="unique")
    op.create_unique_constraint(
        op.f("outcomes_command_id_key"),
        "outcomes",
        ["command_id"],
        postgresql_nulls_not_distinct=False,
    )
    op.drop_column("outcomes", "next_reconcile_at")
    op.drop_column("outcomes", "reconcile_attempts")
    op.drop_column("outcomes", "resolved_at")
    op.drop_column("outcomes", "resolved_status")
    op.drop_index(op.f("ix_reconciliations_run_id"), table_name="reconciliations")
    op.drop_table("reconciliations")
    op.drop_index(op.f("ix_handoffs_run_id"), table_name="handoffs")
    op.drop_index("ix_handoffs_open", table_name="handoffs")
    op.drop_table("handoffs")
