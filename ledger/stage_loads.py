"""The stages' reads: one ``SELECT`` each, on an autocommit connection.

A stage reads everything its pure decision needs in one statement (the run row plus JSON
aggregates of its grants, confirmations, loop history or recent observations) and writes the
decision back with :func:`warrant.ledger.repo.transition`, whose compare-and-set, trace events,
observation and the :class:`~warrant.ledger.repo.Guarded` writes of
:mod:`warrant.ledger.guarded` form one statement. Both run in autocommit mode
(:func:`autocommit`): one round trip each, no ``BEGIN``/``COMMIT``, and a lost compare-and-set
writes nothing. Starting a command is in :mod:`warrant.ledger.commands`, creating a run in
:mod:`warrant.ledger.runs_create`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, exists, extract, or_, select
from sqlalchemy.orm import Session

from warrant.ledger._compiled import Compiled
from warrant.ledger.db import autocommit_engine, held_autocommit
from warrant.ledger.effect_keys import effects_for, keys_of
from warrant.ledger.mcp_pins import pinned_definition
from warrant.ledger.models import Artifact, Command, GrantRow, OutcomeRow, Run
from warrant.ledger.workers import live_registrations
from warrant.runner.grants import narrowed
from warrant.runner.handoff import LAST_ARTIFACTS, MAX_ID_CHARS
from warrant.runner.spec import GrantConstraints, SuccessSpec
from warrant.runner.step_decisions import CompletionFacts, SucceededCall
from warrant.runner.views import (
    ConfirmationView,
    EffectView,
    GrantView,
    HistoryEntry,
    PreApprovalView,
)
from warrant.tools._contract import SideEffect, Tool
from warrant.tools._deployment import WorkerInfo
from warrant.tools._mcp_pins import McpDefinition, mcp_definition
from warrant.tools._registry import Registry

__all__ = [
    "CMD_COLUMNS",
    "MADE",
    "RUN_COLUMNS",
    "PolicyLoad",
    "artifacts_made_by",
    "autocommit",
    "confirmations_from",
    "grant_views",
    "grants_from",
    "history_from",
    "load_planning",
    "load_policy",
    "load_provenance",
    "load_tool",
    "pre_approvals_from",
    "run_status",
]

#: The ``runs`` columns a stage reads (aliased ``r``): not the goal text nor the answer, and of
#: the spec only the parts it uses (a fixture planner's spec holds every output: large).
RUN_COLUMNS = """
    r.id, r.status, r.phase, r.version, r.step, r.model_calls, r.tool_calls,
    r.tool_calls_by_tool, r.observation_version, r.tokens_used, r.cost_used, r.trace_seq,
    r.subject, r.deadline_at, r.pending_proposal_id, r.active_command_id,
    r.model_calls_delegated,
    coalesce((r.spec -> 'budgets')::text, '{}') AS budgets_json
"""

#: The ``commands`` columns the tool stage reads (aliased ``c``), prefixed ``cmd_``, and
#: whether an operator disabled the command's tool (``cmd_tool_disabled``: read at every
#: claim, so a switch takes effect at the next one).
CMD_COLUMNS = """
  c.id AS cmd_id, c.step AS cmd_step, c.proposal_id AS cmd_proposal_id, c.tool AS cmd_tool,
  c.tool_version AS cmd_tool_version, c.arguments AS cmd_arguments,
  c.idempotency_token AS cmd_token, c.status AS cmd_status, c.attempts AS cmd_attempts,
  c.timeout_s AS cmd_timeout_s, c.deadline_at AS cmd_deadline_at,
  c.confirmation_id AS cmd_confirmation_id, c.worker AS cmd_worker,
  c.started_at AS cmd_started_at, c.branch AS cmd_branch,
  EXISTS (SELECT 1 FROM tool_switches t WHERE t.tool = c.tool AND t.disabled)
    AS cmd_tool_disabled
"""

#: When an observation was recorded, on the database's clock: ISO 8601 in UTC.
_OBSERVED_AT = """to_char({o}.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
_GOAL_AT, _RECENT_AT = _OBSERVED_AT.format(o="o"), _OBSERVED_AT.format(o="x")

#: The run's artifacts: its succeeded effects (an outcome that succeeded, a job that ended
#: succeeded, an unknown effect found applied), the last ``LAST_ARTIFACTS``, oldest first, each
#: ``[command id, tool, version, step, output]`` with the output's nested or long values left
#: out (:func:`warrant.runner.handoff.artifact_of` keeps its ids). A budget stop lists them.
MADE = f"""
  (SELECT coalesce(jsonb_agg(jsonb_build_array(
            m.command_id, m.tool, m.tool_version, m.step, m.output) ORDER BY m.id), '[]'::jsonb)
     FROM (SELECT o.id, o.command_id, c.tool, c.tool_version, c.step,
                  (SELECT jsonb_object_agg(e.key, CASE
                            WHEN jsonb_typeof(e.value) IN ('string', 'number')
                             AND length(e.value::text) <= {MAX_ID_CHARS + 2} THEN e.value END)
                     FROM jsonb_each(CASE WHEN jsonb_typeof(o.output::jsonb) = 'object'
                                     THEN o.output::jsonb ELSE '{{}}'::jsonb END) AS e) AS output
             FROM outcomes o JOIN commands c ON c.id = o.command_id
            WHERE o.run_id = r.id
              AND (o.status = 'succeeded' OR o.resolved_status IN ('applied', 'succeeded'))
            ORDER BY o.id DESC LIMIT {LAST_ARTIFACTS}) m) AS made"""

_PLANNING_SQL = f"""
SELECT {RUN_COLUMNS}, {{spec}}, {MADE},
  (SELECT jsonb_build_array(o.step, o.content, o.kind, o.source, {_GOAL_AT})
     FROM observations o WHERE o.run_id = r.id AND o.observation_id = 'user-1') AS goal,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(
            x.observation_id, x.kind, x.source, x.step, x.content, x.expires_after_step,
            {_RECENT_AT})
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
            ORDER BY key, version DESC) m) AS preferences,
  r.plan, r.waiting,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(c.id, c.tool, c.step,
            CASE c.status WHEN 'issued' THEN 'issued' WHEN 'started' THEN 'in_flight'
                 WHEN 'completed' THEN CASE lo.status WHEN 'accepted' THEN 'job_running'
                                       ELSE 'unknown' END END) ORDER BY c.step, c.branch),
          '[]'::jsonb)
     FROM commands c
     LEFT JOIN LATERAL (SELECT o.status, o.resolved_status FROM outcomes o
                         WHERE o.command_id = c.id ORDER BY o.id DESC LIMIT 1) lo ON true
    WHERE c.run_id = r.id
      AND (c.status IN ('issued', 'started')
           OR (c.status = 'completed' AND lo.status IN ('unknown', 'accepted')
               AND lo.resolved_status IS NULL))) AS pending_effects,
  (SELECT coalesce(jsonb_agg(x.a ORDER BY x.a ->> 0, x.a ->> 3), '[]'::jsonb)
     FROM (SELECT jsonb_build_array('confirmation', c.tool, c.proposal_hash, c.id) AS a
             FROM confirmations c
            WHERE c.run_id = r.id AND c.approved AND NOT c.used AND c.expires_at > now()
           UNION ALL
           SELECT jsonb_build_array('pre_approval', a.tool, a.proposal_hash, a.id::text)
             FROM pre_approvals a WHERE a.run_id = r.id AND a.used_at IS NULL) x)
    AS approved_actions,
  CASE WHEN r.spec -> 'planner' ->> 'kind' NOT IN ('fixture', 'external') THEN
    (SELECT coalesce(jsonb_agg(e.v -> 1 ORDER BY t.seq, e.n), '[]'::jsonb)
       FROM trace_records t
      CROSS JOIN LATERAL jsonb_array_elements(t.events) WITH ORDINALITY AS e(v, n)
      WHERE t.run_id = r.id AND t.step = r.step + 1
        AND t.events @> '[["model.retry.scheduled"]]'::jsonb
        AND e.v ->> 0 = 'model.retry.scheduled' AND e.v -> 1 -> 'version' = to_jsonb(r.version))
  END AS retries
FROM runs r WHERE r.id = %(run_id)s
"""
_PLANNING = Compiled.text(_PLANNING_SQL.replace("{spec}", "NULL::jsonb AS spec"))
_PLANNING_WITH_SPEC = Compiled.text(_PLANNING_SQL.replace("{spec}", "r.spec"))

_POLICY = Compiled.text(
    f"""
SELECT {RUN_COLUMNS}, r.spec -> 'handoff' AS handoff, {MADE},
  r.spec -> 'policy' AS run_policy,
  to_jsonb(p) AS proposal,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(g.id, g.capability, g.resource_scope,
            g.expires_at_step, g.max_uses, g.uses, g.destinations_from,
            extract(epoch FROM g.expires_at), g.constraints) ORDER BY g.id),
          '[]'::jsonb)
     FROM grants g WHERE g.run_id = r.id) AS grants,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(c.id, c.proposal_hash, c.tool, c.approved,
            c.used, c.expires_at_step, extract(epoch FROM c.expires_at), c.covers_run)
          ORDER BY c.created_at), '[]'::jsonb)
     FROM confirmations c WHERE c.run_id = r.id) AS confirmations,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(a.id, a.proposal_hash, a.tool, a.approved_by,
            a.used_at IS NOT NULL) ORDER BY a.id), '[]'::jsonb)
     FROM pre_approvals a WHERE a.run_id = r.id) AS pre_approvals,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(h.fingerprint, h.observation_version)
          ORDER BY h.step, h.branch), '[]'::jsonb)
     FROM proposals h
    WHERE h.run_id = r.id AND h.step < p.step AND h.fingerprint IS NOT NULL
      AND h.observation_version = r.observation_version) AS history,
  (SELECT coalesce(jsonb_object_agg(t.tool, coalesce(t.reason, '')), '{{}}'::jsonb)
     FROM tool_switches t WHERE t.disabled) AS disabled_tools,
  CASE WHEN r.spec -> 'handoff' -> 'after_untrusted_refusals' IS NOT NULL THEN
    (SELECT count(*) FROM proposals u
      WHERE u.run_id = r.id AND u.kind = 'tool' AND u.status = 'rejected'
        AND u.step > (SELECT min(o.step) FROM observations o
                       WHERE o.run_id = r.id AND o.source = 'untrusted-content'))
  END AS untrusted_refusals,
  CASE WHEN p.status IS DISTINCT FROM 'received' THEN
    (SELECT jsonb_build_array(c.id, c.idempotency_token, c.attempts) FROM commands c
      WHERE c.run_id = r.id AND c.step = p.step AND c.proposal_pk = p.id LIMIT 1)
  END AS refused_command,
  CASE WHEN CAST(%(policy_hash)s AS text) IS NOT NULL THEN
    EXISTS (SELECT 1 FROM policy_approvals a WHERE a.policy_hash = %(policy_hash)s)
  END AS policy_approved
FROM runs r LEFT JOIN proposals p ON p.id = r.pending_proposal_id
WHERE r.id = %(run_id)s
"""
)
"""Loop detection only looks at earlier proposals made at the run's current observation
version (versions only grow, so those are the history's suffix; see ``warrant.runner.policy``).
``untrusted_refusals``: the run's tool proposals refused by the gate (a person's "no"
included) at a step after its first untrusted read, counted only when the spec's
``handoff.after_untrusted_refusals`` asks. ``refused_command``: the command its tool refused
for this proposal for a permission (the run then waited for a grant), looked up only for a
proposal the gate has seen before (a new one is ``received``). ``disabled_tools``: the tools
an operator disabled (``warrant tools disable``), each with its reason: read on every gate
decision, so a switch takes effect at the next one. ``policy_approved``: whether the policy
worker's deployment policy hash (``policy_hash``, passed only when
``WARRANT_POLICY_APPROVAL=required``; else NULL and so is this) is one an operator approved."""

_TOOL = Compiled.text(
    f"""
SELECT {RUN_COLUMNS}, {CMD_COLUMNS},
       extract(epoch FROM now() - c.started_at)::float8 AS cmd_running_s,
       extract(epoch FROM now() - c.heartbeat_at)::float8 AS cmd_heartbeat_age_s
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
    observations, its capabilities, the subject's live preferences and ``retries``: the
    details of the current version's ``model.retry.scheduled`` events (a model planner's only:
    a fixture planner never asks for later, and nobody asks a model for an external run);
    the run's latest ``plan`` and stored ``waiting``; its ``pending_effects`` (commands whose
    effect is not settled: ``[id, tool, step, status]``, status ``issued``, ``in_flight``,
    ``job_running`` or ``unknown``) and ``approved_actions`` (approved confirmations not yet
    used and unexpired, pre-approvals not yet used: ``[kind, tool, proposal hash, id]``);
    None if no such run."""
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


@dataclass(frozen=True)
class RefusedCommand:
    """The command an accepted proposal's tool refused for a permission, issued again."""

    id: str
    idempotency_token: str
    attempts: int


@dataclass(frozen=True)
class PolicyLoad:
    """Everything the policy stage's decision needs, read before it decides."""

    row: Any
    """The run, its pending proposal and the gate's inputs (grants, confirmations,
    pre-approvals, history), ``untrusted_refusals`` and ``refused_command`` (:data:`_POLICY`)."""
    grants: list[GrantView]
    deployment: list[WorkerInfo]
    """The live workers' registrations (:func:`~warrant.ledger.workers.live_registrations`)."""
    pin: tuple[str, McpDefinition, str, dict[str, Any]] | None
    """For an MCP tool: its ``name@version``, its served definition, and the pinned hash and
    definition (the tool's first use pins it)."""
    provenance: Any
    """For a write or egress call, or a tool a task-scoped grant narrows: the goal, the spec
    and the run's observations with their sources (:func:`load_provenance`); else None."""
    set_pins: list[tuple[str, McpDefinition, str, dict[str, Any]]] = field(default_factory=list)
    """A parallel step's: each MCP tool's pin among its calls (as :attr:`pin`)."""
    effects: list[EffectView] = field(default_factory=list)
    """For calls whose tools declare a business effect key: the earlier commands with those
    keys (:func:`~warrant.ledger.effect_keys.effects_for`), newest first."""

    @property
    def refused_command(self) -> RefusedCommand | None:
        found = self.row.refused_command
        return None if found is None else RefusedCommand(*found)

    @classmethod
    def read(
        cls,
        engine: Engine,
        run_id: str,
        version: int,
        registry: Registry,
        *,
        policy_hash: str | None = None,
    ) -> PolicyLoad | None:
        """The policy stage's one load, None when the message is stale (no such run, another
        version, no pending proposal). Beyond the run's row (:func:`load_policy`: one
        statement; ``policy_hash``: the deployment policy whose approval it reads, None: not
        read), only an MCP tool's pin (a primary-key read, which pins a first use), a
        write or egress call's provenance and the earlier commands with a call's business
        effect key are read, each for those calls only."""
        with autocommit(engine) as conn:
            row = load_policy(conn, run_id, policy_hash=policy_hash)
            if row is None or row.version != version or row.proposal is None:
                return None
            proposal = row.proposal
            grants = grants_from(run_id, row.grants)
            pins, provenance = [], None
            for tool in _tools_of(proposal, registry):
                served = mcp_definition(tool)
                if served is not None:
                    key = f"{tool.name}@{tool.version}"
                    pins.append((key, served, *pinned_definition(conn, served, run_id=run_id)))
                if provenance is None and (
                    tool.side_effect is not SideEffect.READ or tool.egress or narrowed(tool, grants)
                ):
                    provenance = load_provenance(conn, run_id)
            effects = effects_for(conn, run_id, *keys_of(proposal, registry))
        parallel = proposal["kind"] == "parallel"
        pin = None if parallel or not pins else pins[0]
        deployment = live_registrations(engine)
        return cls(row, grants, deployment, pin, provenance, pins if parallel else [], effects)


def _tools_of(proposal: dict[str, Any], registry: Registry) -> list[Tool[Any, Any]]:
    """The tools a pending proposal names: its own, or each call's of a parallel step (the
    calls are untrusted: any that does not name a tool this worker has is left out here)."""
    named = [(proposal["tool"], proposal["tool_version"])]
    raw = proposal.get("raw")
    if proposal["kind"] == "parallel" and isinstance(raw, dict):
        calls = raw.get("calls")
        named = [
            (c.get("tool"), c.get("tool_version"))
            for c in (calls if isinstance(calls, list) else [])
            if isinstance(c, dict)
        ]
    tools, seen = [], set()
    for name, version in named:
        if not isinstance(name, str) or not isinstance(version, str) or (name, version) in seen:
            continue
        seen.add((name, version))
        tool = registry.get(name, version)
        if tool is not None:
            tools.append(tool)
    return tools


def load_policy(conn: Connection, run_id: str, *, policy_hash: str | None = None) -> Any:
    """The run, its pending proposal and the gate's inputs (the :data:`_POLICY` statement)."""
    return _POLICY.first(conn, {"run_id": run_id, "policy_hash": policy_hash})


_PROVENANCE = Compiled.text(
    """
SELECT r.goal, r.spec,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(o.observation_id, o.source, o.content)
          ORDER BY o.id), '[]'::jsonb)
     FROM observations o WHERE o.run_id = r.id) AS observations
FROM runs r WHERE r.id = %(run_id)s
"""
)


def load_provenance(conn: Connection, run_id: str) -> Any:
    """What a write or egress call's argument values may come from: the goal, the spec and
    the run's observations (with their sources)."""
    return _PROVENANCE.first(conn, {"run_id": run_id})


def pre_approvals_from(rows: list[list[Any]]) -> list[PreApprovalView]:
    return [
        PreApprovalView(
            pre_approval_id=a[0], proposal_hash=a[1], tool=a[2], approved_by=a[3], used=a[4]
        )
        for a in rows
    ]


def load_tool(conn: Connection, run_id: str, command_id: str) -> Any:
    """The run and the command (its columns prefixed ``cmd_``), with ``cmd_running_s``: how
    long its current attempt has been started by the database's clock (None if never), the
    only clock every host shares (a lease is never judged by a host's own clock)."""
    return _TOOL.first(conn, {"run_id": run_id, "command_id": command_id})


def grants_from(run_id: str, rows: Iterable[Sequence[Any]]) -> list[GrantView]:
    return [
        GrantView(
            grant_id=g[0],
            run_id=run_id,
            capability=g[1],
            resource_scope=g[2],
            expires_at_step=g[3],
            max_uses=g[4],
            uses=g[5],
            destinations_from=tuple(g[6] or ()) if len(g) > 6 else (),
            expires_at=float(g[7]) if len(g) > 7 and g[7] is not None else None,
            constraints=GrantConstraints.model_validate(g[8]) if len(g) > 8 and g[8] else None,
        )
        for g in rows
    ]


#: A grants row's columns in the order :func:`grants_from` reads them (the order the stages'
#: SQL builds each grant's array in), for a read through a session.
_GRANT_COLUMNS = (
    GrantRow.id,
    GrantRow.capability,
    GrantRow.resource_scope,
    GrantRow.expires_at_step,
    GrantRow.max_uses,
    GrantRow.uses,
    GrantRow.destinations_from,
    extract("epoch", GrantRow.expires_at),
    GrantRow.constraints,
)


def grant_views(s: Session, run_id: str, *where: Any) -> list[GrantView]:
    """The run's grants (those matching ``where``), oldest first, as the gate sees them
    (:func:`grants_from`)."""
    query = select(*_GRANT_COLUMNS).where(GrantRow.run_id == run_id, *where).order_by(GrantRow.id)
    return grants_from(run_id, s.execute(query).all())


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
            covers_run=bool(c[7]),
        )
        for c in rows
    ]


def history_from(rows: list[list[Any]]) -> list[HistoryEntry]:
    return [HistoryEntry(fingerprint=str(f), observation_version=v) for f, v in rows]


_STATUS = Compiled.text("SELECT status FROM runs WHERE id = %(id)s")


def run_status(conn: Connection, run_id: str) -> str | None:
    """The run's status, or None if there is no such run."""
    row = _STATUS.first(conn, {"id": run_id})
    return None if row is None else str(row.status)


# -- The tool stage's reads of a command's proposal, on its rare paths only: a tool's own
# permission refusal (``warrant.runner.permission_wait``: the run's ``on_missing_grant``, the
# proposal the wait is for) and a call whose tool has a precondition read (``Tool.precondition``:
# the fingerprint the approver's confirmation is bound to, migration 0021, and the proposal a
# moved state copies into a new request). The refused command the policy stage issues again
# once the same proposal is accepted after the grant is in the policy stage's load.


#: The proposal columns a request asked again carries over (``broker.tool.preconditions``).
PROPOSAL_COPIED = (
    "proposal_id",
    "kind",
    "tool",
    "tool_version",
    "raw",
    "arguments",
    "fingerprint",
    "proposal_hash",
    "confirmation_request",
    "provenance",
)

_PROPOSAL = Compiled.text(
    "SELECT "
    + ", ".join(f"p.{c}" for c in PROPOSAL_COPIED)
    + ", cf.precondition_fingerprint AS approved_fingerprint, c.proposal_pk,"
    " r.spec -> 'policy' ->> 'on_missing_grant' AS on_missing_grant"
    " FROM commands c JOIN runs r ON r.id = c.run_id JOIN proposals p ON p.id = c.proposal_pk"
    " LEFT JOIN confirmations cf ON cf.id = c.confirmation_id"
    " WHERE c.id = %(command_id)s"
)


def command_proposal(conn: Connection, command_id: str) -> Any:
    """The command's proposal (the :data:`PROPOSAL_COPIED` columns and its row id
    ``proposal_pk``), ``approved_fingerprint`` (the precondition its confirmation was given on:
    None when the read failed at the request, or there is no such confirmation) and the run's
    ``on_missing_grant`` (None when not set). None without the command."""
    return _PROPOSAL.first(conn, {"command_id": command_id})


_OUTCOME_CODE = Compiled.text(
    "SELECT code FROM outcomes WHERE command_id = %(command_id)s AND attempt = %(attempt)s"
    " ORDER BY id DESC LIMIT 1"
)


def outcome_code(conn: Connection, command_id: str, *, attempt: int) -> str | None:
    """The code of the command's outcome of ``attempt`` (None: no outcome, or no code)."""
    row = _OUTCOME_CODE.first(conn, {"command_id": command_id, "attempt": attempt})
    return None if row is None else row.code


# -- The ledger facts a run's success conditions are checked on (queries only): the spec's
# ``success`` declaration, the run's calls whose outcome succeeded, the paths of its artifacts.
# The pure :func:`warrant.runner.step_decisions.check_success` decides.


_MADE = Compiled.text(f"SELECT {MADE} FROM runs r WHERE r.id = %(run_id)s")


def artifacts_made_by(conn: Any, run_id: str) -> list[list[Any]]:
    """The run's artifacts as a stage load reads them (:data:`MADE`): for a path whose load
    has not read them (a handoff, a caller's proposal stopped by a budget)."""
    row = _MADE.first(conn, {"run_id": run_id})
    return list(row.made) if row is not None else []


def success_of(conn: Any, run_id: str) -> SuccessSpec | None:
    """The run's ``success`` declaration (None: the spec declares none)."""
    declared = conn.execute(select(Run.spec["success"]).where(Run.id == run_id)).scalar()
    return SuccessSpec.model_validate(declared) if declared else None


def completion_facts(
    conn: Any, run_id: str, *, unverified: frozenset[tuple[str, str]] = frozenset()
) -> CompletionFacts:
    """What the run did, as the ledger says: each command with an outcome that succeeded, a
    job that ended succeeded, or an unknown effect found applied (``verified: false`` for a
    tool among ``unverified``: ``(name, version)`` of writes nothing reads back); and its
    stored artifacts."""
    succeeded = exists().where(
        OutcomeRow.command_id == Command.id,
        or_(
            OutcomeRow.status == "succeeded",
            OutcomeRow.resolved_status.in_(("applied", "succeeded")),
        ),
    )
    calls = conn.execute(
        select(Command.tool, Command.tool_version, Command.arguments, Command.step)
        .where(Command.run_id == run_id, succeeded)
        .order_by(Command.step)
    ).all()
    paths = conn.execute(select(Artifact.path).where(Artifact.run_id == run_id)).scalars()
    return CompletionFacts(
        succeeded_calls=tuple(
            SucceededCall(tool, version, arguments or {}, step, (tool, version) not in unverified)
            for tool, version, arguments, step in calls
        ),
        artifact_paths=frozenset(paths),
    )
