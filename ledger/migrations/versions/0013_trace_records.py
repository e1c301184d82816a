"""one trace row per transition: trace_records, and trace_events as a view over it

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 11:00:00.000000

A step wrote about fifteen ``trace_events`` rows (each a heap tuple, a primary-key entry and
a foreign-key check), every one in the same statement as its transition. Now a transition
writes one ``trace_records`` row holding its events in order (``events``: ``[[name, details],
…]``; ``seq`` is the first event's number, the next ones follow), about four rows per step.
``trace_events`` stays, as a view with the same columns (one row per event, the same
sequence numbers), for every reader: the API, the CLI, tests, SQL of the operator's own.

Existing events are moved one per record (their order and numbers kept). Both the table and
the view refuse ``UPDATE`` (the trace is append-only); deletes remain the cascade's and
retention's. On a large ledger, run the upgrade in a quiet window: it rewrites the trace.
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION warrant_trace_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the trace is append-only: % is not allowed', TG_OP;
END
$$ LANGUAGE plpgsql;
"""

VIEW = """
CREATE VIEW trace_events AS
SELECT t.run_id, t.seq + (e.n - 1)::integer AS seq, (e.v ->> 0)::varchar(64) AS event, t.step,
       t.proposal_id, e.v -> 1 AS details, t.created_at
  FROM trace_records t
 CROSS JOIN LATERAL jsonb_array_elements(t.events) WITH ORDINALITY AS e(v, n)
"""


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE trace_records (
    run_id varchar(36) NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq integer NOT NULL,
    step integer NOT NULL,
    proposal_id varchar(200),
    events jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT trace_records_pkey PRIMARY KEY (run_id, seq)
)"""
    )
    op.execute(
        "INSERT INTO trace_records (run_id, seq, step, proposal_id, events, created_at) "
        "SELECT run_id, seq, step, proposal_id, jsonb_build_array(jsonb_build_array(event, "
        "details)), created_at FROM trace_events"
    )
    op.execute("DROP TABLE trace_events")  # and its trigger
    op.execute(APPEND_ONLY)
    op.execute(VIEW)
    op.execute(
        "CREATE TRIGGER trace_records_append_only BEFORE UPDATE ON trace_records "
        "FOR EACH ROW EXECUTE FUNCTION warrant_trace_append_only()"
    )
    op.execute(
        "CREATE TRIGGER trace_events_append_only INSTEAD OF UPDATE ON trace_events "
        "FOR EACH ROW EXECUTE FUNCTION warrant_trace_append_only()"
    )


def downgrade() -> None:
    op.execute("DROP VIEW trace_events")
    op.execute(
        """
CREATE TABLE trace_events (
    run_id varchar(36) NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq integer NOT NULL,
    event varchar(64) NOT NULL,
    step integer NOT NULL,
    proposal_id varchar(200),
    details jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT trace_events_pkey PRIMARY KEY (run_id, seq)
)"""
    )
    op.execute(
        "INSERT INTO trace_events (run_id, seq, event, step, proposal_id, details, created_at) "
        "SELECT t.run_id, t.seq + (e.n - 1)::integer, e.v ->> 0, t.step, t.proposal_id, "
        "e.v -> 1, t.created_at FROM trace_records t "
        "CROSS JOIN LATERAL jsonb_array_elements(t.events) WITH ORDINALITY AS e(v, n)"
    )
    op.execute("DROP TABLE trace_records")
    op.execute(APPEND_ONLY.replace("the trace is", "trace_events is"))
    op.execute(
        "CREATE TRIGGER trace_events_append_only BEFORE UPDATE ON trace_events "
        "FOR EACH ROW EXECUTE FUNCTION warrant_trace_append_only()"
    )
