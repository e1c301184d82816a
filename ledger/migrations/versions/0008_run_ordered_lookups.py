"""observations, proposals and trace: indexes in the order the stages read them

* ``observations (run_id, id)``: the planner reads a run's latest observations (``ORDER BY
  id DESC LIMIT n``). With only ``(run_id, observation_id)`` to go by, PostgreSQL either read
  all of the run's observations and sorted them (a step cost grew with the run's length) or,
  with a generic plan, walked the whole table's primary key backwards, skipping every other
  run's rows.
* ``observations (run_id, content_hash)``: a tool result bumps the run's observation version
  only when its content is new; that check read all of the run's observations.
* ``proposals (run_id, observation_version, step)``: loop detection reads the run's earlier
  proposals made at its current observation version; it read all of the run's earlier
  proposals.
* ``trace_events``: the primary key is ``(run_id, seq)`` (was a surrogate ``id`` plus a
  unique ``(run_id, seq)``): one index and one sequence draw less per event, about fifteen
  events per step.

The indexes are built without ``CONCURRENTLY``: on a large ledger, run the upgrade in a
quiet window.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 07:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_observations_run_order", "observations", ["run_id", "id"])
    op.create_index("ix_observations_run_hash", "observations", ["run_id", "content_hash"])
    op.create_index(
        "ix_proposals_run_version", "proposals", ["run_id", "observation_version", "step"]
    )
    op.drop_constraint("trace_events_pkey", "trace_events", type_="primary")
    op.drop_column("trace_events", "id")
    op.drop_constraint("uq_trace_run_seq", "trace_events", type_="unique")
    op.create_primary_key("trace_events_pkey", "trace_events", ["run_id", "seq"])


def downgrade() -> None:
    op.drop_constraint("trace_events_pkey", "trace_events", type_="primary")
    op.create_unique_constraint("uq_trace_run_seq", "trace_events", ["run_id", "seq"])
    op.add_column("trace_events", sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False))
    op.create_primary_key("trace_events_pkey", "trace_events", ["id"])
    op.drop_index("ix_proposals_run_version", table_name="proposals")
    op.drop_index("ix_observations_run_hash", table_name="observations")
    op.drop_index("ix_observations_run_order", table_name="observations")
