"""A fork in the ledger (:mod:`warrant.runner.forks`): a new live run that starts from a
source run's record before a step, written in one transaction.

What is copied, and what is referenced:

* **copied** into the fork (its own rows, so every stage, the planner's view, the gate's loop
  history, success conditions and ``ledger verify`` read them as the fork's): the source's
  observations recorded at a step before ``at`` (same ids, kinds, sources, contents,
  versions; the goal ``user-1`` is the fork's spec's), and the proposals, commands (new ids,
  the same idempotency tokens: the effects they name happened once, in the source) and
  outcomes of those steps. Their row hashes go on the fork's trace (``ledger.rows_hashed``).
* **carried** as counters: the model calls and tool calls (per tool too) made before ``at``
  (the source's own when the fork starts after its last step), its tokens and cost (the
  source's whole: never fresh by forking); each grant's uses before ``at``, by capability.
* **referenced** only: the source itself (``source_run_id``, ``source_step``), its trace,
  confirmations, artifacts and sub-runs; the fork has its own trace from ``run.created``.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy.orm import Session

from warrant.ledger._compiled import Compiled
from warrant.ledger.chain_store import decision_rows
from warrant.ledger.models import Command, Observation, OutcomeRow, Proposal
from warrant.ledger.repo import note_rows
from warrant.ledger.runs_create import create_from_spec
from warrant.runner.errors import RunNotFound
from warrant.runner.forks import FORK, counted_grants, fork_problem
from warrant.runner.spec import RunSpec

__all__ = ["fork_run"]

#: The source as a fork reads it (its row share-locked: no stage commits meanwhile): its kind
#: and step, the steps before ``at`` whose effect is not settled (as ``pending_effects``
#: says), the model calls its last planner step before ``at`` counted, its tool calls and its
#: grants' uses (by capability) made before ``at``.
_SOURCE = Compiled.text(
    """
SELECT r.id, r.kind, r.step, r.trace_id, r.model_calls, r.model_calls_delegated,
  r.tool_calls, r.tool_calls_by_tool, r.tokens_used, r.cost_used,
  (SELECT coalesce(array_agg(DISTINCT c.step), '{}')
     FROM commands c
     LEFT JOIN LATERAL (SELECT o.status, o.resolved_status FROM outcomes o
                         WHERE o.command_id = c.id ORDER BY o.id DESC LIMIT 1) lo ON true
    WHERE c.run_id = r.id AND c.step < %(at)s
      AND (c.status IN ('issued', 'started')
           OR (c.status = 'completed' AND lo.status IN ('unknown', 'accepted')
               AND lo.resolved_status IS NULL))) AS unsettled,
  (SELECT coalesce(max((e.v -> 1 ->> 'model_calls')::int), 0)
     FROM trace_records t CROSS JOIN LATERAL jsonb_array_elements(t.events) AS e(v)
    WHERE t.run_id = r.id AND t.step < %(at)s
      AND t.events @> '[["proposal.received"]]'::jsonb
      AND e.v ->> 0 = 'proposal.received') AS model_calls_before,
  (SELECT coalesce(jsonb_object_agg(x.tool, x.n), '{}'::jsonb)
     FROM (SELECT c.tool, sum(greatest(c.attempts, 1))::int AS n FROM commands c
            WHERE c.run_id = r.id AND c.step < %(at)s GROUP BY c.tool) x) AS tool_calls_before,
  (SELECT coalesce(jsonb_object_agg(x.capability, x.n), '{}'::jsonb)
     FROM (SELECT g.capability, count(*)::int AS n
             FROM commands c
            CROSS JOIN LATERAL jsonb_array_elements_text(c.grant_ids::jsonb) AS u(id)
             JOIN grants g ON g.id = u.id::bigint AND g.run_id = r.id
            WHERE c.run_id = r.id AND c.step < %(at)s
            GROUP BY g.capability) x) AS grant_uses_before
FROM runs r WHERE r.id = %(source)s
FOR SHARE OF r
"""
)


def _columns(table: Any, *skip: str) -> list[str]:
    return [c.name for c in table.__table__.columns if c.name not in skip]


_OBSERVATION_COLUMNS = _columns(Observation, "id", "run_id")
_PROPOSAL_COLUMNS = _columns(Proposal, "id", "run_id")
_COMMAND_COLUMNS = _columns(Command, "id", "run_id", "proposal_pk")
_OUTCOME_COLUMNS = _columns(OutcomeRow, "id", "run_id", "command_id")


def _listed(columns: list[str], alias: str = "") -> str:
    return ", ".join(f"{alias}{c}" for c in columns)


#: The source's rows before ``at`` written as the fork's, in one statement: proposals and
#: commands under new ids (a command's proposal and an outcome's command mapped to them).
_COPY = Compiled.text(
    f"""
WITH p_map AS MATERIALIZED (
  SELECT p.id AS old_id, nextval(pg_get_serial_sequence('proposals', 'id')) AS new_id
    FROM proposals p WHERE p.run_id = %(source)s AND p.step < %(at)s
), c_map AS MATERIALIZED (
  SELECT c.id AS old_id, gen_random_uuid()::text AS new_id
    FROM commands c WHERE c.run_id = %(source)s AND c.step < %(at)s
), obs AS (
  INSERT INTO observations (run_id, {_listed(_OBSERVATION_COLUMNS)})
  SELECT %(fork)s, {_listed(_OBSERVATION_COLUMNS, "o.")} FROM observations o
   WHERE o.run_id = %(source)s AND o.step < %(at)s AND o.observation_id <> 'user-1'
   ORDER BY o.id
  RETURNING observation_version
), props AS (
  INSERT INTO proposals (id, run_id, {_listed(_PROPOSAL_COLUMNS)})
  SELECT m.new_id, %(fork)s, {_listed(_PROPOSAL_COLUMNS, "p.")}
    FROM proposals p JOIN p_map m ON m.old_id = p.id ORDER BY p.id
  RETURNING id
), cmds AS (
  INSERT INTO commands (id, run_id, proposal_pk, {_listed(_COMMAND_COLUMNS)})
  SELECT cm.new_id, %(fork)s, pm.new_id, {_listed(_COMMAND_COLUMNS, "c.")}
    FROM commands c JOIN c_map cm ON cm.old_id = c.id JOIN p_map pm ON pm.old_id = c.proposal_pk
  RETURNING id
), outs AS (
  INSERT INTO outcomes (run_id, command_id, {_listed(_OUTCOME_COLUMNS)})
  SELECT %(fork)s, cm.new_id, {_listed(_OUTCOME_COLUMNS, "o.")}
    FROM outcomes o JOIN c_map cm ON cm.old_id = o.command_id ORDER BY o.id
  RETURNING id
)
SELECT (SELECT count(*) FROM obs) AS observations, (SELECT count(*) FROM props) AS proposals,
       (SELECT count(*) FROM cmds) AS commands, (SELECT count(*) FROM outs) AS outcomes,
       (SELECT coalesce(max(observation_version), 1) FROM obs) AS observation_version
"""
)

#: The fork's pre-approvals its source spent before ``at`` are spent in the fork too: a
#: pre-approval covers one call, and the source made it (the fork carries that call).
_SPENT = Compiled.text(
    """
UPDATE pre_approvals f SET used_at = s.used_at, used_by_proposal = s.used_by_proposal
  FROM pre_approvals s
 WHERE f.run_id = %(fork)s AND f.used_at IS NULL AND s.run_id = %(source)s
   AND s.proposal_hash = f.proposal_hash AND s.used_at IS NOT NULL
   AND EXISTS (SELECT 1 FROM proposals p WHERE p.run_id = s.run_id
                 AND p.proposal_id = s.used_by_proposal AND p.step < %(at)s)
RETURNING f.id
"""
)

_SET_FORK = Compiled.text(
    """
UPDATE runs SET kind = %(kind)s, source_run_id = %(source)s, source_step = %(at)s,
       step = %(step)s, model_calls = %(model_calls)s,
       model_calls_delegated = %(model_calls_delegated)s, tool_calls = %(tool_calls)s,
       tool_calls_by_tool = %(tool_calls_by_tool)s, tokens_used = %(tokens_used)s,
       cost_used = %(cost_used)s, observation_version = %(observation_version)s
 WHERE id = %(fork)s
RETURNING id
"""
)


def fork_run(
    s: Session,
    *,
    fork_id: str,
    source_run_id: str,
    at: int,
    spec: RunSpec,
    pre_approvals: list[dict[str, Any]],
    trace_id: str | None,
    started_by: str | None = None,
) -> dict[str, Any]:
    """Record the fork of ``source_run_id`` at step ``at`` (with the validated ``spec``) in
    the session's transaction: ``RunNotFound``, or ``InvalidRequest`` with the refusal's code
    (:func:`warrant.runner.forks.fork_problem`), writes nothing. Returns what it carried (as its
    ``run.created`` names it) and the rows copied; the caller publishes its first step."""
    source = _SOURCE.first(s, {"source": source_run_id, "at": at})
    if source is None:
        raise RunNotFound(f"no run {source_run_id}")
    refusal = fork_problem(
        source_kind=source.kind, last_step=source.step, at=at, unsettled=source.unsettled
    )
    if refusal is not None:
        raise refusal
    counters = _counters(source, at)
    carried = {"source_run_id": source.id, "source_step": at, **counters}
    carried["grant_uses"] = dict(source.grant_uses_before)
    _create(
        s, fork_id, spec, pre_approvals, trace_id=trace_id, started_by=started_by, named=carried
    )
    copied = _COPY.first(s, {"source": source.id, "fork": fork_id, "at": at})
    params = {"fork": fork_id, "source": source.id, "at": at, "kind": FORK, "step": at - 1}
    params |= {"observation_version": copied.observation_version, **counters}
    params["tool_calls_by_tool"] = Jsonb(counters["tool_calls_by_tool"])
    _SET_FORK.first(s, params)
    _SPENT.all(s, {"fork": fork_id, "source": source.id, "at": at})
    rows = decision_rows(s.connection(), [fork_id]).get(fork_id, [])
    note_rows(s, fork_id, [(row["table"], row) for row in rows])
    return {**carried, "copied": copied._asdict()}


def _counters(source: Any, at: int) -> dict[str, Any]:
    """The counters the fork starts with: the source's own when it starts after the source's
    last step, else those of the steps before ``at``; tokens and cost the source's whole."""
    whole = at > source.step
    return {
        "model_calls": source.model_calls if whole else source.model_calls_before,
        "model_calls_delegated": source.model_calls_delegated if whole else 0,
        "tool_calls": source.tool_calls if whole else sum(source.tool_calls_before.values()),
        "tool_calls_by_tool": dict(
            source.tool_calls_by_tool if whole else source.tool_calls_before
        ),
        "tokens_used": source.tokens_used or 0,
        "cost_used": source.cost_used or 0.0,
    }


def _create(
    s: Session,
    fork_id: str,
    spec: RunSpec,
    pre_approvals: list[dict[str, Any]],
    *,
    trace_id: str | None,
    started_by: str | None,
    named: dict[str, Any],
) -> None:
    """The fork's run row, grants (with the source's uses), pre-approvals, goal observation
    and first trace events, as any run's (:func:`warrant.ledger.runs_create.create_from_spec`)."""
    grants = counted_grants([g.model_dump(mode="json") for g in spec.grants], named["grant_uses"])
    create_from_spec(
        s.connection(),
        run_id=fork_id,
        spec=spec,
        trace_id=trace_id,
        named={"kind": FORK, **named},
        grants=grants,
        pre_approvals=pre_approvals,
        started_by=started_by,
    )
