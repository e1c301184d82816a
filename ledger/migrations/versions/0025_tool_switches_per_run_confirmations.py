"""a per-tool kill switch, and per-run confirmations that cover the run

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 14:00:00.000000

``tool_switches``: one row per tool an operator ever disabled (``warrant tools disable``):
whether it is disabled now, why, who changed it last and when, and ``history`` (every
``tool.disabled`` / ``tool.enabled``, oldest first). The policy gate refuses a disabled tool's
calls (``TOOL_DISABLED``) and the tool stage will not start a command issued for one.
``confirmations.covers_run``: the person approved a ``per-run`` confirmation: once used, it
covers the tool's later calls in the run (a per-call one stays single use).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_switches",
        sa.Column("tool", sa.String(200), primary_key=True),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("changed_by", sa.String(200), nullable=False),
        sa.Column(
            "changed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("history", postgresql.JSONB(), nullable=False),
    )
    op.add_column(
        "confirmations",
        sa.Column("covers_run", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("confirmations", "covers_run")
    op.drop_table("tool_switches")
