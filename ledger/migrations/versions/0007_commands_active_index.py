"""commands: index only started commands; drop the unused token index

A command row is updated twice per step (``issued -> started -> completed``), and a status
change cannot be heap-only, so every update added an entry to each of the table's four
indexes. The reconciler looks only for ``started`` commands past their lease: a partial index
on ``started_at`` of started commands serves it and takes an entry only when a command starts
(the primary key and ``(run_id, step)`` still take one per update). The index is built
without ``CONCURRENTLY``: on a large ledger, run the upgrade in a quiet window.
No query looks commands up by idempotency token (the token is for the tools' external
systems), so its index is dropped.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 04:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_commands_token", table_name="commands")
    op.drop_index("ix_commands_status_started", table_name="commands")
    op.create_index(
        "ix_commands_started",
        "commands",
        ["started_at"],
        unique=False,
        postgresql_where=sa.text("status = 'started'"),
    )


def downgrade() -> None:
    op.drop_index("ix_commands_started", table_name="commands")
    op.create_index(
        "ix_commands_status_started", "commands", ["status", "started_at"], unique=False
    )
    op.create_index("ix_commands_token", "commands", ["idempotency_token"], unique=False)
