"""indexes for retention: runs by finish time, commands by proposal, reconciliations by command

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-15 10:00:00.000000

``warrant ledger prune`` takes the oldest finished runs first (``ix_runs_finished``, only the
terminal runs take an entry), and deleting a proposal or a command runs the cascade's check
``DELETE FROM commands WHERE proposal_pk = $1`` / ``DELETE FROM reconciliations WHERE
command_id = $1`` once per deleted row: without these two indexes, a sequential scan each.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_finished",
        "runs",
        ["finished_at"],
        postgresql_where=sa.text("status IN ('completed', 'failed', 'cancelled')"),
    )
    op.create_index("ix_commands_proposal", "commands", ["proposal_pk"])
    op.create_index("ix_reconciliations_command", "reconciliations", ["command_id"])


def downgrade() -> None:
    op.drop_index("ix_reconciliations_command", table_name="reconciliations")
    op.drop_index("ix_commands_proposal", table_name="commands")
    op.drop_index("ix_runs_finished", table_name="runs")
