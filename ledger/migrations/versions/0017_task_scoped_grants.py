"""grants: task-scoped grants (the sources their resource values must appear in)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04 14:00:00.000000

``destinations_from``: the sources a task-scoped grant names (``goal``, ``spec``,
``answers``, ``observations:<tool>``); NULL for a grant that is not narrowed (every grant
before this revision).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("grants", sa.Column("destinations_from", JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("grants", "destinations_from")
