"""Creating a run: one statement (autocommit) writes the run row, its grants, its goal
observation and its first trace events. A run started with an idempotency key is found again
by that key (:func:`run_for_idempotency_key`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import Connection

from warrant.ledger._compiled import Compiled
from warrant.runner import run_machine as machine
from warrant.runner.canonical import content_hash
from warrant.runner.codes import ObservationKind, ObservationSource
from warrant.runner.spec import RunSpec

__all__ = ["create_from_spec", "create_run", "run_for_idempotency_key"]

_CREATE_RUN = Compiled.text(
    """
WITH run AS (
  INSERT INTO runs (id, status, phase, version, step, model_calls, tool_calls,
                    tool_calls_by_tool, observation_version, tokens_used, cost_used, trace_seq,
                    goal, subject, spec, trace_id, deadline_at, idempotency_key, spec_hash,
                    started_by)
  VALUES (%(id)s, %(status)s, %(phase)s, 1, 0, 0, 0, '{}'::jsonb, 1, 0, 0,
          jsonb_array_length(%(events)s), %(goal)s, %(subject)s, %(spec)s, %(trace_id)s,
          %(deadline_at)s, %(idempotency_key)s, %(spec_hash)s, %(started_by)s)
  RETURNING id
), grants AS (
  INSERT INTO grants (run_id, capability, resource_scope, expires_at_step, max_uses, uses, source,
                      destinations_from, expires_at, constraints)
  SELECT run.id, g->>'capability', g->>'resource_scope', (g->>'expires_at_step')::int,
         (g->>'max_uses')::int, coalesce((g->>'uses')::int, 0), 'spec',
         nullif(g->'destinations_from', 'null'::jsonb),
         (g->>'expires_at')::timestamptz, nullif(g->'constraints', 'null'::jsonb)
    FROM run, jsonb_array_elements(%(grants)s) AS g
), pre AS (
  INSERT INTO pre_approvals (run_id, proposal_hash, tool, tool_version, arguments, approved_by)
  SELECT run.id, a->>'proposal_hash', a->>'tool', a->>'tool_version', a->'arguments',
         a->>'approved_by'
    FROM run, jsonb_array_elements(%(pre_approvals)s) AS a
), goal AS (
  INSERT INTO observations (run_id, observation_id, kind, source, step, content, content_hash,
                            observation_version)
  SELECT run.id, %(o_id)s, %(o_kind)s, %(o_source)s, 0, %(o_content)s, %(o_hash)s, 1 FROM run
), events AS (
  INSERT INTO trace_records (run_id, seq, step, events)
  SELECT run.id, 1, 0, %(events)s FROM run WHERE jsonb_array_length(%(events)s) > 0
)
SELECT id FROM run
"""
)

_BY_KEY = Compiled.text("SELECT id, spec_hash FROM runs WHERE idempotency_key = %(key)s")


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
    pre_approvals: Sequence[dict[str, Any]] = (),
    events: list[tuple[str, dict[str, Any]]],
    spec_hash: str | None = None,
    idempotency_key: str | None = None,
    started_by: str | None = None,
) -> None:
    """A new run in one statement: the run row (version 1), its grants (``uses`` 0 unless a
    grant says otherwise: a fork's carry its source's) and pre-approvals, its
    goal observation and its first trace events (``seq`` 1..n). An ``idempotency_key``
    another run holds already violates the unique index ``uq_runs_idempotency_key``
    (``psycopg.IntegrityError``) and writes nothing."""
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
            "pre_approvals": Jsonb(list(pre_approvals)),
            "o_id": observation["observation_id"],
            "o_kind": observation["kind"],
            "o_source": observation["source"],
            "o_content": Jsonb(observation["content"]),
            "o_hash": observation["content_hash"],
            "events": Jsonb([[name, details] for name, details in events]),
            "idempotency_key": idempotency_key,
            "spec_hash": spec_hash,
            "started_by": started_by,
        },
    )


def run_for_idempotency_key(conn: Connection, key: str) -> tuple[str, str | None] | None:
    """(run id, spec hash) of the run started with idempotency key ``key``, or ``None``."""
    row = _BY_KEY.first(conn, {"key": key})
    return None if row is None else (row.id, row.spec_hash)


def create_from_spec(
    conn: Connection,
    *,
    run_id: str,
    spec: RunSpec,
    trace_id: str | None,
    named: Mapping[str, Any] | None = None,
    grants: list[dict[str, Any]] | None = None,
    pre_approvals: Sequence[dict[str, Any]] = (),
    idempotency_key: str | None = None,
    spec_hash: str | None = None,
    started_by: str | None = None,
) -> None:
    """A run of the validated ``spec`` (a producer's, a sub-run's, a fork's): its first
    transition (``run.created`` with the subject's digest, the grant and pre-approval counts,
    the budgets and ``named``), its goal as the ``user-1`` observation, its deadline from now
    and ``grants`` (default: the spec's, unused), written by :func:`create_run`."""
    goal = {"goal": spec.goal}
    created = {
        "subject_hash": content_hash(spec.subject)[:16],
        "grants": len(spec.grants),
        "pre_approved": len(pre_approvals),
        "budgets": spec.budgets.model_dump(mode="json"),
        **(named or {}),
    }
    first = machine.start(created=created)
    dumped = spec.model_dump(mode="json")
    create_run(
        conn,
        run_id=run_id,
        status=first.status.value,
        phase=first.phase.value,
        goal=spec.goal,
        subject=spec.subject,
        spec=dumped,
        trace_id=trace_id,
        deadline_at=datetime.now(tz=UTC) + timedelta(seconds=spec.budgets.deadline_s),
        grants=[g.model_dump(mode="json") for g in spec.grants] if grants is None else grants,
        pre_approvals=pre_approvals,
        observation={
            "observation_id": "user-1",
            "kind": ObservationKind.USER.value,
            "source": ObservationSource.USER.value,
            "content": goal,
            "content_hash": content_hash(goal),
        },
        events=list(first.events),
        idempotency_key=idempotency_key,
        spec_hash=spec_hash or content_hash(dumped),
        started_by=started_by,
    )
