"""trace_records chained per run (prev_hash, hash) and ledger_anchors for prune batches

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04 14:00:00.000000

Tamper evidence. Every ``trace_records`` row gets ``prev_hash`` (the ``hash`` of the run's
previous record by ``seq``; 64 zeros for the first) and ``hash`` =
``sha256(canonical text)``, computed by a ``BEFORE INSERT`` trigger (``warrant_trace_chain``)
whatever the writer supplied: ``warrant_trace_hash`` is the one definition of the canonical
text, and :mod:`warrant.ledger.chain` recomputes exactly the same in Python. Inserts of one
run are serialised by the run row (every insert path allocates ``runs.trace_seq`` in the same
statement or transaction, or creates the run), so the lookup of the previous row (one
backward step of the primary key) sees it. Existing rows are chained here, run by run.

``ledger_anchors`` keeps one row per prune batch: the pruned runs' heads (run, last
sequence number, final hash) and a hash over them, so a run missing from the ledger can be
shown to have been removed by a prune (and checked against its archive).
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

HASH = r"""
CREATE OR REPLACE FUNCTION warrant_trace_hash(
    prev varchar, run_id varchar, seq integer, step integer, proposal_id varchar,
    created_at timestamptz, events jsonb
) RETURNS varchar AS $$
  SELECT encode(sha256(convert_to(concat_ws(E'\n', 'warrant-trace-v1', prev, run_id,
         seq::text, step::text, coalesce('p:' || proposal_id, ''),
         to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
         events::text), 'UTF8')), 'hex')
$$ LANGUAGE sql STABLE
"""

CHAIN = """
CREATE OR REPLACE FUNCTION warrant_trace_chain() RETURNS trigger AS $$
DECLARE
    prev varchar(64);
BEGIN
    SELECT t.hash INTO prev FROM trace_records t
     WHERE t.run_id = NEW.run_id AND t.seq < NEW.seq
     ORDER BY t.seq DESC LIMIT 1;
    NEW.prev_hash := coalesce(prev, repeat('0', 64));
    NEW.hash := warrant_trace_hash(NEW.prev_hash, NEW.run_id, NEW.seq, NEW.step,
                                   NEW.proposal_id, NEW.created_at, NEW.events);
    RETURN NEW;
END
$$ LANGUAGE plpgsql VOLATILE
"""

BACKFILL = """
DO $$
DECLARE
    r record;
    prev varchar(64);
    last_run varchar(36) := NULL;
    h varchar(64);
BEGIN
    FOR r IN SELECT run_id, seq, step, proposal_id, created_at, events
               FROM trace_records ORDER BY run_id, seq LOOP
        IF last_run IS DISTINCT FROM r.run_id THEN
            prev := repeat('0', 64);
            last_run := r.run_id;
        END IF;
        h := warrant_trace_hash(prev, r.run_id, r.seq, r.step, r.proposal_id, r.created_at,
                                r.events);
        UPDATE trace_records SET prev_hash = prev, hash = h
         WHERE run_id = r.run_id AND seq = r.seq;
        prev := h;
    END LOOP;
END
$$
"""


def upgrade() -> None:
    op.execute("ALTER TABLE trace_records ADD COLUMN prev_hash varchar(64)")
    op.execute("ALTER TABLE trace_records ADD COLUMN hash varchar(64)")
    op.execute(HASH)
    op.execute("ALTER TABLE trace_records DISABLE TRIGGER trace_records_append_only")
    op.execute(BACKFILL)
    op.execute("ALTER TABLE trace_records ENABLE TRIGGER trace_records_append_only")
    op.execute("ALTER TABLE trace_records ALTER COLUMN prev_hash SET NOT NULL")
    op.execute("ALTER TABLE trace_records ALTER COLUMN hash SET NOT NULL")
    op.execute(CHAIN)
    op.execute(
        "CREATE TRIGGER trace_records_chain BEFORE INSERT ON trace_records "
        "FOR EACH ROW EXECUTE FUNCTION warrant_trace_chain()"
    )
    op.execute(
        """
CREATE TABLE ledger_anchors (
    batch_id varchar(36) PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    runs integer NOT NULL,
    heads jsonb NOT NULL,
    anchor_hash varchar(64) NOT NULL
)"""
    )
    op.execute(
        "CREATE TRIGGER ledger_anchors_append_only BEFORE UPDATE ON ledger_anchors "
        "FOR EACH ROW EXECUTE FUNCTION warrant_trace_append_only()"
    )


def downgrade() -> None:
    op.execute("DROP TABLE ledger_anchors")
    op.execute("DROP TRIGGER trace_records_chain ON trace_records")
    op.execute("DROP FUNCTION warrant_trace_chain()")
    op.execute(
        "DROP FUNCTION warrant_trace_hash(varchar, varchar, integer, integer, varchar, "
        "timestamptz, jsonb)"
    )
    op.execute("ALTER TABLE trace_records DROP COLUMN hash")
    op.execute("ALTER TABLE trace_records DROP COLUMN prev_hash")
