"""grants: constraints on a call's argument values (an amount cap, the values allowed)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 14:30:00.000000

``grants.constraints``: the grant's ``Grant.constraints`` as the spec gave them (``{"max":
{"amount_cents": 10000}, "in": {"currency": ["EUR"]}}``); the gate refuses a call whose
arguments break one (``GRANT_CONSTRAINT_VIOLATED``). NULL for a grant without constraints
(every grant before this revision).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("grants", sa.Column("constraints", JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("grants", "constraints")
