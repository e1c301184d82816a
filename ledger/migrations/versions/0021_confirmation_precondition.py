"""confirmations: the precondition fingerprint the approver saw

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04 17:00:00.000000

A tool may declare a precondition read (``Tool.precondition``): the state of the resource the
approver is asked about. Its fingerprint is shown with the confirmation request and kept with
the person's decision; the tool stage reads it again just before the call runs and refuses a
moved one (``PRECONDITION_CHANGED``). NULL: no precondition (or it could not be read).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "confirmations",
        sa.Column("precondition_fingerprint", sa.String(64), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("confirmations", "precondition_fingerprint")
