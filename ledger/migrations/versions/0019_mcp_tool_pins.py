"""mcp_tool_pins: the accepted definition of each declared MCP server tool, by hash

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 10:00:00.000000

One row per (server, tool): the hash and the definition (name, description, inputSchema,
annotations) its first use pinned or an operator last accepted (``warrant mcp accept``), who
and when, and every acceptance before (``history``). The policy gate refuses a call of a tool
whose server serves another definition (``MCP_TOOL_CHANGED``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_tool_pins",
        sa.Column("server", sa.String(64), primary_key=True),
        sa.Column("tool", sa.String(64), primary_key=True),
        sa.Column("definition_hash", sa.String(64), nullable=False),
        sa.Column("definition", JSONB(), nullable=False),
        sa.Column("accepted_by", sa.String(200), nullable=False),
        sa.Column(
            "accepted_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("history", JSONB(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("mcp_tool_pins")
