"""runs: how often the stalled-run sweep re-published the run at its current version

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 23:55:00.000000

The reconciler re-published a stalled run's message every ``WARRANT_STALL_AFTER_S`` for as
long as nobody took it: with every tool worker cut off for 80 s, a queue grew by 140 copies of
4 commands (each a duplicate the tool stage then had to turn away). ``republish_version`` and
``republish_count`` let the sweep back off: the k-th re-publish of one version waits
``stall_after_s * 2**k`` (capped); a run that moves to another version starts again at 0.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("republish_version", sa.Integer(), nullable=True))
    op.add_column(
        "runs",
        sa.Column("republish_count", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_column("runs", "republish_count")
    op.drop_column("runs", "republish_version")
