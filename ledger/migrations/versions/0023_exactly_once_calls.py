"""exactly once across a lost reply: callers' keys of proposals; commands' business effect keys

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 17:30:00.000000

``caller_keys``: the key a caller gave a proposal of its run (an agent framework's tool-call id,
an MCP session's request, an HTTP ``Idempotency-Key``), the step and branch it became, and the
digest of the call it named. The same key again is that step, never a second one; the same key
with another call is refused.

``commands.effect_key``: the tool's declared business effect key over the command's arguments
(e.g. ``refund:42``); a second command with a key already succeeded or unknown is refused
``DUPLICATE_EFFECT``. Indexed for the lookup across runs within a tool's window.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "caller_keys",
        sa.Column(
            "run_id", sa.String(36), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("branch", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("run_id", "key", name="pk_caller_keys"),
    )
    op.add_column("commands", sa.Column("effect_key", sa.String(300), nullable=True))
    op.create_index(
        "ix_commands_effect_key",
        "commands",
        ["effect_key", "created_at"],
        postgresql_where=sa.text("effect_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_commands_effect_key", table_name="commands")
    op.drop_column("commands", "effect_key")
    op.drop_table("caller_keys")
