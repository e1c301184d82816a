"""parallel steps: a step's branches (proposals and commands) and the run's open fan-out

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 11:00:00.000000

A planner may propose several independent tool calls in one step (``kind: parallel``). Each call
is a branch: its own proposal row and command row, numbered ``branch`` 1..N inside the step (0:
an ordinary step, and the parallel step's own proposal). ``runs.fan_out`` holds the open
parallel step (its merge rule, branch deadline and branches) until its verdict; NULL: none.
``commands.cut_at``: when the step's merge cut the branch (a running attempt is interrupted).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "proposals", sa.Column("branch", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column("commands", sa.Column("branch", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("commands", sa.Column("cut_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("runs", sa.Column("fan_out", postgresql.JSONB(), nullable=True))
    op.drop_constraint("uq_proposals_run_step", "proposals", type_="unique")
    op.create_unique_constraint("uq_proposals_run_step", "proposals", ["run_id", "step", "branch"])
    op.drop_constraint("uq_commands_run_step", "commands", type_="unique")
    op.create_unique_constraint("uq_commands_run_step", "commands", ["run_id", "step", "branch"])


def downgrade() -> None:
    op.drop_constraint("uq_commands_run_step", "commands", type_="unique")
    op.execute("DELETE FROM commands WHERE branch > 0")
    op.create_unique_constraint("uq_commands_run_step", "commands", ["run_id", "step"])
    op.drop_constraint("uq_proposals_run_step", "proposals", type_="unique")
    op.execute("DELETE FROM proposals WHERE branch > 0")
    op.create_unique_constraint("uq_proposals_run_step", "proposals", ["run_id", "step"])
    op.drop_column("runs", "fan_out")
    op.drop_column("commands", "cut_at")
    op.drop_column("commands", "branch")
    op.drop_column("proposals", "branch")
