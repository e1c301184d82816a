"""grants: a wall-clock expiry (issue 36 item 6)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-10 10:00:00.000000

``expires_at``: the moment a grant stops covering calls, compared by the policy stage with the
database's clock (never a worker's own); NULL for a grant without one (every grant before
this revision).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("grants", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("grants", "expires_at")
