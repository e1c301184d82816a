"""worker_registrations: one row per worker process, not per node name

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 20:30:00.000000

Node names are not unique: several ``warrant worker`` processes on one host (or two hosts with
one host name) shared one row, so ``warrant tools check`` saw one of them and a stopping worker
deleted the others' registration. A row is now keyed by ``process``, the worker process's
identity (``<pid>.<started>.<space>``, see ``warrant.broker.process_identity``); ``node``
stays as a column for people. Registrations are refreshed every 30 s by live workers, so the
existing rows are dropped: each live worker writes its own again at its next start, and
until then the gate treats its tools as it treats a queue no worker has registered for.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM worker_registrations")
    op.drop_constraint("worker_registrations_pkey", "worker_registrations", type_="primary")
    op.add_column("worker_registrations", sa.Column("process", sa.String(80), nullable=False))
    op.create_primary_key("worker_registrations_pkey", "worker_registrations", ["process"])
    op.create_index("ix_worker_registrations_node", "worker_registrations", ["node"])


def downgrade() -> None:
    op.execute("DELETE FROM worker_registrations")
    op.drop_index("ix_worker_registrations_node", table_name="worker_registrations")
    op.drop_constraint("worker_registrations_pkey", "worker_registrations", type_="primary")
    op.drop_column("worker_registrations", "process")
    op.create_primary_key("worker_registrations_pkey", "worker_registrations", ["node"])
