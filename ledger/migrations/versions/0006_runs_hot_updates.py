"""runs: updates that keep the status are HOT

A step updates its run three times (version, counters, ``updated_at``). With ``updated_at`` in
an index, none of those updates could be heap-only; indexing ``status`` alone (the sweeps
filter running or waiting runs by status and sort that small set) and leaving free space in
each page lets PostgreSQL update the row in place without touching any index.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 02:20:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_runs_status_updated", table_name="runs")
    op.create_index("ix_runs_status", "runs", ["status"], unique=False)
    op.execute("ALTER TABLE runs SET (fillfactor = 70)")


def downgrade() -> None:
    op.execute("ALTER TABLE runs RESET (fillfactor)")
    op.drop_index("ix_runs_status", table_name="runs")
    op.create_index("ix_runs_status_updated", "runs", ["status", "updated_at"], unique=False)
