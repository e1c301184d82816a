"""memory policy and append-only trace

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 23:35:22.940649
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


APPEND_ONLY = """
CREATE OR REPLACE FUNCTION warrant_trace_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'trace_events is append-only: % is not allowed', TG_OP;
END
$$ LANGUAGE plpgsql;
"""


def upgrade() -> None:
    op.execute(APPEND_ONLY)
    op.execute(
        "CREATE TRIGGER trace_events_append_only BEFORE UPDATE ON trace_events "
        "FOR EACH ROW EXECUTE FUNCTION warrant_trace_append_only()"
    )
    op.create_index("ix_memory_subject_key", "memory_records", ["subject", "key"], unique=False)
    op.add_column("observations", sa.Column("expires_after_step", sa.Integer(), nullable=True))
    op.create_check_constraint(
        "ck_memory_source", "memory_records", "source_kind = 'user-confirmation'"
    )
    op.create_check_constraint(
        "ck_memory_not_instruction", "memory_records", "key <> 'system_instruction'"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS trace_events_append_only ON trace_events")
    op.execute("DROP FUNCTION IF EXISTS warrant_trace_append_only()")
    op.drop_constraint("ck_memory_not_instruction", "memory_records", type_="check")
    op.drop_constraint("ck_memory_source", "memory_records", type_="check")
    op.drop_column("observations", "expires_after_step")
    op.drop_index("ix_memory_subject_key", table_name="memory_records")
