"""Starting a command (one statement, autocommit: guarded by the run's version and status,
tracing ``tool.started``), and discarding one that will never run."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from warrant.ledger._compiled import Compiled
from warrant.ledger.stage_loads import CMD_COLUMNS, RUN_COLUMNS

__all__ = [
    "beat_commands",
    "cancelled_among",
    "claim_command",
    "discard_command",
    "start_command",
]


#: A command started (attempt + 1, its worker; its first heartbeat if that is its lease).
_STARTED = """status = 'started', attempts = c.attempts + 1, started_at = now(),
         worker = CAST(%(worker)s AS varchar),
         heartbeat_at = CASE WHEN CAST(%(heartbeat)s AS boolean) THEN now() END"""
#: The run takes command ``c``: running at ``version`` (a parallel step's call: at any
#: version, and while the run reconciles a sibling call's effect).
_RUN_TAKES_IT = """EXISTS (SELECT 1 FROM runs r
                  WHERE r.id = %(run_id)s
                    AND (r.status = 'running' OR (c.branch > 0 AND r.status = 'reconciling'))
                    AND (r.version = %(version)s OR c.branch > 0))"""

_START = Compiled.text(
    f"""
WITH cmd AS (
  UPDATE commands c SET {_STARTED}
   WHERE c.id = %(command_id)s
     AND (c.status = 'issued'
          OR (c.status = 'started' AND CAST(%(reinvoke)s AS boolean)
              AND c.attempts = CAST(%(seen)s AS integer)))
     AND c.cut_at IS NULL
     AND {_RUN_TAKES_IT}
  RETURNING c.attempts, c.step, c.proposal_id, c.tool, c.tool_version, c.timeout_s,
            c.idempotency_token
), seq AS (
  UPDATE runs r SET trace_seq = r.trace_seq + 1 FROM cmd WHERE r.id = %(run_id)s
  RETURNING r.trace_seq
), event AS (
  INSERT INTO trace_records (run_id, seq, step, proposal_id, events)
  SELECT CAST(%(run_id)s AS varchar), seq.trace_seq, cmd.step, cmd.proposal_id,
         jsonb_build_array(jsonb_build_array('tool.started', jsonb_build_object(
           'tool', cmd.tool, 'version', cmd.tool_version,
           'attempt', cmd.attempts, 'timeout_s', round(cmd.timeout_s::numeric, 3),
           'idempotency_key_hash', CAST(%(key_hash)s AS text))))
    FROM cmd, seq
)
SELECT attempts FROM cmd
"""
)


def start_command(
    conn: Connection,
    *,
    run_id: str,
    version: int,
    command_id: str,
    worker: str | None,
    reinvoke: bool,
    seen_attempt: int,
    key_hash: str,
    heartbeat: bool = False,
) -> int | None:
    """Mark the command ``started`` (attempt + 1) and trace ``tool.started``, if the run is
    still running at ``version`` (a parallel step's call: at any version, and while the run
    reconciles a sibling call's effect) and the command is ``issued`` (or ``started`` at
    ``seen_attempt``, whose holder is gone, and ``reinvoke``: safe to re-invoke). Returns the
    attempt, or None if nothing was started. ``heartbeat``: the attempt's lease is its
    heartbeat (a threads-pool worker renews ``heartbeat_at``), not its time limit."""
    row = _START.first(
        conn,
        {
            "run_id": run_id,
            "version": version,
            "command_id": command_id,
            "worker": worker,
            "reinvoke": reinvoke,
            "seen": seen_attempt,
            "key_hash": key_hash,
            "heartbeat": heartbeat,
        },
    )
    return None if row is None else int(row.attempts)


_CLAIM = Compiled.text(
    f"""
WITH c AS (
  UPDATE commands c SET {_STARTED}
   WHERE c.id = %(command_id)s AND c.run_id = %(run_id)s AND c.status = 'issued'
     AND c.tool = %(tool)s AND c.tool_version = ANY(%(versions)s)
     AND c.cut_at IS NULL
     AND {_RUN_TAKES_IT}
  RETURNING {CMD_COLUMNS}
), r AS (
  UPDATE runs r SET trace_seq = r.trace_seq + 1 FROM c WHERE r.id = %(run_id)s
  RETURNING {RUN_COLUMNS}
), event AS (
  INSERT INTO trace_records (run_id, seq, step, proposal_id, events)
  SELECT r.id, r.trace_seq, c.cmd_step, c.cmd_proposal_id,
         jsonb_build_array(jsonb_build_array('tool.started', jsonb_build_object(
           'tool', c.cmd_tool, 'version', c.cmd_tool_version, 'attempt', c.cmd_attempts,
           'timeout_s', round(c.cmd_timeout_s::numeric, 3),
           'idempotency_key_hash',
           left(encode(sha256(convert_to(c.cmd_token, 'UTF8')), 'hex'), 16))))
    FROM c, r
)
SELECT r.*, c.* FROM r, c
"""
)


def claim_command(
    conn: Connection,
    *,
    run_id: str,
    version: int,
    command_id: str,
    tool: str,
    versions: list[str],
    worker: str | None,
    heartbeat: bool = False,
) -> Any:
    """The common case of :func:`load_tool` and :func:`start_command` in one statement: if
    the run is running at ``version`` and the command is ``issued`` for ``tool`` at one of
    ``versions`` (those this worker has), mark it ``started`` (attempt + 1, ``tool.started``
    traced) and return the run and the command as :func:`load_tool` does (``cmd_attempts``
    is the new attempt). None otherwise: nothing was written, and the caller sorts the case
    out with :func:`load_tool`.

    The returned run row is the row as updated, which may be newer than ``version`` if a
    concurrent writer (a cancel) committed in between: the caller must keep ``version`` for
    its compare-and-set."""
    return _CLAIM.first(
        conn,
        {
            "run_id": run_id,
            "version": version,
            "command_id": command_id,
            "tool": tool,
            "versions": versions,
            "worker": worker,
            "heartbeat": heartbeat,
        },
    )


_DISCARD = Compiled.text(
    "UPDATE commands SET status = 'discarded' WHERE id = %(id)s AND status = 'issued' RETURNING id"
)


def discard_command(conn: Connection, command_id: str) -> None:
    """A command whose run stopped before it started will never run."""
    _DISCARD.first(conn, {"id": command_id})


_BEAT = text(
    """
UPDATE commands c SET heartbeat_at = now()
  FROM runs r
 WHERE c.id = ANY(:ids) AND c.status = 'started' AND c.worker = :worker
   AND r.id = c.run_id
RETURNING c.id, CASE WHEN c.cut_at IS NULL THEN r.status ELSE 'cancelling' END AS status
"""
)


def beat_commands(conn: Connection, command_ids: list[str], *, worker: str) -> dict[str, str]:
    """Renew the heartbeat of the ``started`` attempts among ``command_ids`` that ``worker``
    holds (one statement); returns each renewed command's run status (a cancel is seen
    here). A command missing from the answer is no longer this worker's attempt."""
    rows = conn.execute(_BEAT, {"ids": command_ids, "worker": worker}).all()
    return {row.id: row.status for row in rows}


_CANCELLED = text(
    "SELECT id FROM runs WHERE id = ANY(:ids) AND status IN ('cancelling', 'cancelled')"
)


def cancelled_among(conn: Connection, run_ids: list[str]) -> set[str]:
    """Which of ``run_ids`` are being (or have been) cancelled: one statement."""
    return set(conn.execute(_CANCELLED, {"ids": run_ids}).scalars())
