"""The stages' hot path: one read and one write per stage, each a single statement.

A stage reads everything its pure decision needs in one ``SELECT`` (the run row plus JSON
aggregates of its grants, confirmations, loop history or recent observations) and writes the
decision back with :func:`warrant.ledger.repo.transition`, whose compare-and-set, trace events,
observation and the :class:`~warrant.ledger.repo.Guarded` writes built here form one statement. Both
run in autocommit mode (:func:`autocommit`): one round trip each, no ``BEGIN``/``COMMIT``,
and a lost compare-and-set writes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    any_,
    bindparam,
    exists,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert

from warrant.ledger._compiled import Compiled
from warrant.ledger.db import autocommit_engine, held_autocommit
from warrant.ledger.models import Command, Confirmation, GrantRow, OutcomeRow, Proposal
from warrant.ledger.repo import Guarded
from warrant.runner.state import ConfirmationView, GrantView, HistoryEntry

__all__ = [
    "autocommit",
    "claim_command",
    "complete_command",
    "confirmations_from",
    "create_run",
    "discard_command",
    "grants_from",
    "history_from",
    "insert_command",
    "insert_outcome",
    "insert_proposal",
    "load_planning",
    "load_policy",
    "load_tool",
    "run_status",
    "start_command",
    "update_proposal",
    "use_confirmation",
    "use_grants",
]

#: The ``runs`` columns a stage reads: not the goal text nor the answer, and of the spec only
#: the parts it uses (a fixture planner's spec holds every output: large).
_RUN_COLUMNS = """
    r.id, r.status, r.phase, r.version, r.step, r.model_calls, r.tool_calls,
    r.tool_calls_by_tool, r.observation_version, r.tokens_used, r.cost_used, r.trace_seq,
    r.subject, r.deadline_at, r.pending_proposal_id, r.active_command_id,
    coalesce((r.spec -> 'budgets')::text, '{}') AS budgets_json
"""

_CMD_COLUMNS = """
  c.id AS cmd_id, c.step AS cmd_step, c.proposal_id AS cmd_proposal_id, c.tool AS cmd_tool,
  c.tool_version AS cmd_tool_version, c.arguments AS cmd_arguments,
  c.idempotency_token AS cmd_token, c.status AS cmd_status, c.attempts AS cmd_attempts,
  c.timeout_s AS cmd_timeout_s, c.deadline_at AS cmd_deadline_at,
  c.confirmation_id AS cmd_confirmation_id, c.worker AS cmd_worker,
  c.started_at AS cmd_started_at
"""

_PLANNING_SQL = f"""
SELECT {_RUN_COLUMNS}, {{spec}},
  (SELECT jsonb_build_array(o.step, o.content, o.kind, o.source) FROM observations o
    WHERE o.run_id = r.id AND o.observation_id = 'user-1') AS goal,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(
            x.observation_id, x.kind, x.source, x.step, x.content, x.expires_after_step)
          ORDER BY x.id), '[]'::jsonb)
     FROM (SELECT * FROM observations o
            WHERE o.run_id = r.id AND o.observation_id <> 'user-1'
            ORDER BY o.id DESC LIMIT %(recent)s) x) AS recent,
  (SELECT coalesce(array_agg(g.capability), '{{}}') FROM grants g
    WHERE g.run_id = r.id) AS capabilities,
  (SELECT coalesce(jsonb_object_agg(m.key, jsonb_build_object(
            'value', m.value, 'source', m.source_kind, 'version', m.version)), '{{}}'::jsonb)
     FROM (SELECT DISTINCT ON (key) key, value, source_kind, version FROM memory_records
            WHERE subject = r.subject AND key = ANY(CAST(%(keys)s AS text[])) AND revoked_at IS NULL
              AND (expires_at IS NULL OR expires_at > now())
            ORDER BY key, version DESC) m) AS preferences
FROM runs r WHERE r.id = %(run_id)s
"""
_PLANNING = Compiled.text(_PLANNING_SQL.replace("{spec}", "NULL::jsonb AS spec"))
_PLANNING_WITH_SPEC = Compiled.text(_PLANNING_SQL.replace("{spec}", "r.spec"))

_POLICY = Compiled.text(
    f"""
SELECT {_RUN_COLUMNS}, r.spec -> 'handoff' AS handoff,
  to_jsonb(p) AS proposal,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(g.id, g.capability, g.resource_scope,
            g.expires_at_step, g.max_uses, g.uses) ORDER BY g.id), '[]'::jsonb)
     FROM grants g WHERE g.run_id = r.id) AS grants,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(c.id, c.proposal_hash, c.tool, c.approved,
            c.used, c.expires_at_step, extract(epoch FROM c.expires_at))
          ORDER BY c.created_at), '[]'::jsonb)
     FROM confirmations c WHERE c.run_id = r.id) AS confirmations,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(h.fingerprint, h.observation_version)
          ORDER BY h.step), '[]'::jsonb)
     FROM proposals h
    WHERE h.run_id = r.id AND h.step < p.step AND h.fingerprint IS NOT NULL
      AND h.observation_version = r.observation_version) AS history
FROM runs r LEFT JOIN proposals p ON p.id = r.pending_proposal_id
WHERE r.id = %(run_id)s
"""
)
"""Loop detection only looks at earlier proposals made at the run's current observation
version (versions only grow, so those are the history's suffix; see ``warrant.runner.policy``)."""

_TOOL = Compiled.text(
    f"""
SELECT {_RUN_COLUMNS}, {_CMD_COLUMNS}
FROM runs r JOIN commands c ON c.run_id = r.id
WHERE r.id = %(run_id)s AND c.id = %(command_id)s
"""
)


@contextmanager
def autocommit(engine: Engine, *, relaxed: bool = False, held: bool = True) -> Iterator[Connection]:
    """A connection in autocommit mode: each statement is its own transaction (``relaxed``:
    see :func:`warrant.ledger.db.autocommit_engine`). ``held``: the thread's own, kept between
    uses (:func:`warrant.ledger.db.held_autocommit`; stage workers); otherwise checked out of the
    pool for this use only (clients, which may have many threads)."""
    if held:
        with held_autocommit(engine, relaxed=relaxed) as conn:
            yield conn
    else:
        with autocommit_engine(engine, relaxed=relaxed).connect() as conn:
            yield conn


def load_planning(
    conn: Connection,
    run_id: str,
    *,
    recent: int,
    memory_keys: tuple[str, ...],
    with_spec: bool = True,
) -> Any:
    """The run (its ``spec`` None unless ``with_spec``), its goal, its ``recent`` latest
    observations, its capabilities and the subject's live preferences; None if no such run."""
    statement = _PLANNING_WITH_SPEC if with_spec else _PLANNING
    return statement.first(
        conn, {"run_id": run_id, "recent": recent, "keys": _array_literal(memory_keys)}
    )


@functools.lru_cache(maxsize=64)
def _array_literal(values: tuple[str, ...]) -> str:
    """``values`` as a PostgreSQL array literal (every element quoted), bound as text and cast
    in the statement: psycopg adapts a list element by element on every call, and the keys
    are the same every time."""
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"


def load_policy(conn: Connection, run_id: str) -> Any:
    """The run, its pending proposal and the gate's inputs (grants, confirmations, history)."""
    return _POLICY.first(conn, {"run_id": run_id})


def load_tool(conn: Connection, run_id: str, command_id: str) -> Any:
    """The run and the command (its columns prefixed ``cmd_``)."""
    return _TOOL.first(conn, {"run_id": run_id, "command_id": command_id})


_START = Compiled.text(
    """
WITH cmd AS (
  UPDATE commands c SET status = 'started', attempts = c.attempts + 1, started_at = now(),
         worker = CAST(%(worker)s AS varchar)
   WHERE c.id = %(command_id)s
     AND (c.status = 'issued'
          OR (c.status = 'started' AND CAST(%(reinvoke)s AS boolean)
              AND c.attempts = CAST(%(seen)s AS integer)))
     AND EXISTS (SELECT 1 FROM runs r
                  WHERE r.id = %(run_id)s AND r.version = %(version)s AND r.status = 'running')
  RETURNING c.attempts, c.step, c.proposal_id, c.tool, c.tool_version, c.timeout_s,
            c.idempotency_token
), seq AS (
  UPDATE runs r SET trace_seq = r.trace_seq + 1 FROM cmd WHERE r.id = %(run_id)s
  RETURNING r.trace_seq
), event AS (
  INSERT INTO trace_events (run_id, seq, event, step, proposal_id, details)
  SELECT CAST(%(run_id)s AS varchar), seq.trace_seq, 'tool.started', cmd.step, cmd.proposal_id,
         jsonb_build_object('tool', cmd.tool, 'version', cmd.tool_version,
                            'attempt', cmd.attempts, 'timeout_s', round(cmd.timeout_s::numeric, 3),
                            'idempotency_key_hash', CAST(%(key_hash)s AS text))
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
) -> int | None:
    """Mark the command ``started`` (attempt + 1) and trace ``tool.started``, if the run is
    still running at ``version`` and the command is ``issued`` (or ``started`` at
    ``seen_attempt``, whose holder is gone, and ``reinvoke``: safe to re-invoke). Returns the
    attempt, or None if nothing was started."""
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
        },
    )
    return None if row is None else int(row.attempts)


_CLAIM = Compiled.text(
    f"""
WITH c AS (
  UPDATE commands c SET status = 'started', attempts = c.attempts + 1, started_at = now(),
         worker = CAST(%(worker)s AS varchar)
   WHERE c.id = %(command_id)s AND c.run_id = %(run_id)s AND c.status = 'issued'
     AND c.tool = %(tool)s AND c.tool_version = ANY(%(versions)s)
     AND EXISTS (SELECT 1 FROM runs r
                  WHERE r.id = %(run_id)s AND r.version = %(version)s AND r.status = 'running')
  RETURNING {_CMD_COLUMNS}
), r AS (
  UPDATE runs r SET trace_seq = r.trace_seq + 1 FROM c WHERE r.id = %(run_id)s
  RETURNING {_RUN_COLUMNS}
), event AS (
  INSERT INTO trace_events (run_id, seq, event, step, proposal_id, details)
  SELECT r.id, r.trace_seq, 'tool.started', c.cmd_step, c.cmd_proposal_id,
         jsonb_build_object(
           'tool', c.cmd_tool, 'version', c.cmd_tool_version, 'attempt', c.cmd_attempts,
           'timeout_s', round(c.cmd_timeout_s::numeric, 3),
           'idempotency_key_hash',
           left(encode(sha256(convert_to(c.cmd_token, 'UTF8')), 'hex'), 16))
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
        },
    )


_DISCARD = Compiled.text(
    "UPDATE commands SET status = 'discarded' WHERE id = %(id)s AND status = 'issued' RETURNING id"
)


def discard_command(conn: Connection, command_id: str) -> None:
    """A command whose run stopped before it started will never run."""
    _DISCARD.first(conn, {"id": command_id})


def grants_from(run_id: str, rows: list[list[Any]]) -> list[GrantView]:
    return [
        GrantView(
            grant_id=g[0],
            run_id=run_id,
            capability=g[1],
            resource_scope=g[2],
            expires_at_step=g[3],
            max_uses=g[4],
            uses=g[5],
        )
        for g in rows
    ]


def confirmations_from(run_id: str, rows: list[list[Any]]) -> list[ConfirmationView]:
    return [
        ConfirmationView(
            confirmation_id=c[0],
            run_id=run_id,
            proposal_hash=c[1],
            tool=c[2],
            approved=c[3],
            used=c[4],
            expires_at_step=c[5],
            expires_at=float(c[6]),
        )
        for c in rows
    ]


def history_from(rows: list[list[Any]]) -> list[HistoryEntry]:
    return [HistoryEntry(fingerprint=str(f), observation_version=v) for f, v in rows]


# --- guarded writes ---------------------------------------------------------------------------


def _insert(table: Any, values: dict[str, Any], prefix: str, *, id_column: str | None = None):
    """A builder for an ``INSERT ... SELECT`` of one row from the CAS result; with
    ``id_column``, the row's id is that column of the CAS result."""
    keys = tuple(sorted(values))

    def build(cas: Any) -> Any:
        cols = [bindparam(f"{prefix}{k}", type_=table.c[k].type) for k in keys]
        names = list(keys)
        if id_column is not None:
            cols.insert(0, cas.c[id_column])
            names.insert(0, "id")
        return insert(table).from_select(
            names, select(*cols).select_from(cas), include_defaults=False
        )

    return build


def _guarded(shape: str, build: Any, prefix: str, values: dict[str, Any]) -> Guarded:
    return Guarded(shape, build, {f"{prefix}{k}": v for k, v in values.items()})


_BUILDERS: dict[str, Any] = {}


def _cached(shape: str, factory: Any) -> Any:
    build = _BUILDERS.get(shape)
    if build is None:
        build = _BUILDERS[shape] = factory()
    return build


def insert_proposal(values: dict[str, Any], *, pending: bool = False) -> Guarded:
    """The step's proposal. ``pending``: its id is the run's new ``pending_proposal_id``
    (pass ``NEXT_PROPOSAL_ID`` for that change); otherwise it gets its own id (refused,
    final or stopping proposals)."""
    table: Any = Proposal.__table__
    keys = tuple(sorted(values))
    shape = f"proposal.insert:{pending}:" + ",".join(keys)
    id_column = "pending_proposal_id" if pending else None
    build = _cached(shape, lambda: _insert(table, values, "p_", id_column=id_column))
    return _guarded(shape, build, "p_", values)


def _won(cas: Any) -> Any:
    """True when the transition's compare-and-set updated the run."""
    return exists(select(literal(1)).select_from(cas))


def _update(table: Any, key_column: str, values: dict[str, Any], prefix: str) -> Any:
    keys = tuple(sorted(values))

    def build(cas: Any) -> Any:
        return (
            update(table)
            .where(
                table.c[key_column] == bindparam(f"{prefix}key", type_=table.c[key_column].type),
                _won(cas),
            )
            .values({k: bindparam(f"{prefix}{k}", type_=table.c[k].type) for k in keys})
        )

    return build


def update_proposal(pk: int, values: dict[str, Any]) -> Guarded:
    table: Any = Proposal.__table__
    shape = "proposal.update:" + ",".join(sorted(values))
    build = _cached(shape, lambda: _update(table, "id", values, "pu_"))
    return _guarded(shape, build, "pu_", {**values, "key": pk})


def insert_command(values: dict[str, Any]) -> Guarded:
    table: Any = Command.__table__
    shape = "command.insert:" + ",".join(sorted(values))
    build = _cached(shape, lambda: _insert(table, values, "ci_"))
    return _guarded(shape, build, "ci_", values)


def complete_command(command_id: str, values: dict[str, Any]) -> Guarded:
    table: Any = Command.__table__
    shape = "command.update:" + ",".join(sorted(values))
    build = _cached(shape, lambda: _update(table, "id", values, "cu_"))
    return _guarded(shape, build, "cu_", {**values, "key": command_id})


def insert_outcome(values: dict[str, Any]) -> Guarded:
    """The command's one outcome (a second one for the same attempt is not inserted)."""
    table: Any = OutcomeRow.__table__
    keys = tuple(sorted(values))
    shape = "outcome.insert:" + ",".join(keys)

    def factory() -> Any:
        base = _insert(table, values, "oi_")
        return lambda cas: base(cas).on_conflict_do_nothing(
            constraint="uq_outcomes_command_attempt"
        )

    return _guarded(shape, _cached(shape, factory), "oi_", values)


def use_grants(grant_ids: list[int]) -> Guarded:
    table: Any = GrantRow.__table__

    def factory() -> Any:
        return lambda cas: (
            update(table)
            .where(
                table.c.id == any_(bindparam("gu_ids", type_=ARRAY(BigInteger))),
                _won(cas),
            )
            .values(uses=table.c.uses + 1)
        )

    return Guarded("grants.use", _cached("grants.use", factory), {"gu_ids": list(grant_ids)})


def use_confirmation(confirmation_id: str, at: datetime) -> Guarded:
    table: Any = Confirmation.__table__
    return Guarded(
        "confirmation.use",
        _cached("confirmation.use", lambda: _update(table, "id", {"used": 1, "used_at": 1}, "cf_")),
        {"cf_key": confirmation_id, "cf_used": True, "cf_used_at": at},
    )


_CREATE_RUN = Compiled.text(
    """
WITH run AS (
  INSERT INTO runs (id, status, phase, version, step, model_calls, tool_calls,
                    tool_calls_by_tool, observation_version, tokens_used, cost_used, trace_seq,
                    goal, subject, spec, trace_id, deadline_at)
  VALUES (%(id)s, %(status)s, %(phase)s, 1, 0, 0, 0, '{}'::jsonb, 1, 0, 0,
          jsonb_array_length(%(events)s), %(goal)s, %(subject)s, %(spec)s, %(trace_id)s,
          %(deadline_at)s)
  RETURNING id
), grants AS (
  INSERT INTO grants (run_id, capability, resource_scope, expires_at_step, max_uses, uses, source)
  SELECT run.id, g->>'capability', g->>'resource_scope', (g->>'expires_at_step')::int,
         (g->>'max_uses')::int, 0, 'spec'
    FROM run, jsonb_array_elements(%(grants)s) AS g
), goal AS (
  INSERT INTO observations (run_id, observation_id, kind, source, step, content, content_hash,
                            observation_version)
  SELECT run.id, %(o_id)s, %(o_kind)s, %(o_source)s, 0, %(o_content)s, %(o_hash)s, 1 FROM run
), events AS (
  INSERT INTO trace_events (run_id, seq, event, step, details)
  SELECT run.id, e.n, e.v->>0, 0, e.v->1
    FROM run, jsonb_array_elements(%(events)s) WITH ORDINALITY AS e(v, n)
)
SELECT id FROM run
"""
)


def create_run(
    conn: Connection,
    *,
    run_id: str,
    status: str,
    phase: str,
    goal: str,
    subject: str,
    spec: dict[str, Any],
    trace_id: str | None,
    deadline_at: datetime,
    grants: list[dict[str, Any]],
    observation: dict[str, Any],
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    """A new run in one statement: the run row (version 1), its grants, its goal observation
    and its first trace events (``seq`` 1..n)."""
    _CREATE_RUN.first(
        conn,
        {
            "id": run_id,
            "status": status,
            "phase": phase,
            "goal": goal,
            "subject": subject,
            "spec": Jsonb(spec),
            "trace_id": trace_id,
            "deadline_at": deadline_at,
            "grants": Jsonb(grants),
            "o_id": observation["observation_id"],
            "o_kind": observation["kind"],
            "o_source": observation["source"],
            "o_content": Jsonb(observation["content"]),
            "o_hash": observation["content_hash"],
            "events": Jsonb([[name, details] for name, details in events]),
        },
    )


_STATUS = Compiled.text("SELECT status FROM runs WHERE id = %(id)s")


def run_status(conn: Connection, run_id: str) -> str | None:
    """The run's status, or None if there is no such run."""
    row = _STATUS.first(conn, {"id": run_id})
    return None if row is None else str(row.status)
