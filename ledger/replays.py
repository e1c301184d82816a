"""The ledger side of a replay (:mod:`warrant.runner.replay`): what a run recorded, read for
many runs in one statement, the recent runs a policy review replays, and a replay's own
record (a run of kind ``replay``, finished when written, linked to its source)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine

from warrant.ledger._compiled import Compiled
from warrant.ledger.db import session_scope
from warrant.ledger.models import Run
from warrant.ledger.repo import append_events
from warrant.ledger.stage_loads import (
    autocommit,
    confirmations_from,
    grants_from,
    pre_approvals_from,
)
from warrant.runner.codes import Phase, RunStatus, StopReason
from warrant.runner.replay import (
    RecordedCommand,
    RecordedProposal,
    RecordedRun,
    ReplayReport,
)

__all__ = ["load_recorded", "read_recorded", "recent_run_ids", "record_replay"]

#: Every run of ``ids`` with what its replay reads: its proposals (asked: a person was asked
#: about it, or confirmed it), commands (with the latest outcome), observations, grants with
#: the uses they started with (a fork's carried uses; its own commands' are counted per step
#: by the replay), the ``per-run`` approvals a person gave (each
#: covers the tool's later calls once used), pre-approvals, and the tool switches now.
_RECORDED = Compiled.text(
    """
SELECT r.id, r.kind, r.source_step, r.status, r.goal, r.subject, r.spec,
  extract(epoch FROM r.deadline_at)::float8 AS deadline_at,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(p.step, p.branch, p.kind, p.proposal_id, p.tool,
            p.raw, p.observation_version, p.status, p.rejection_code,
            p.confirmation_request IS NOT NULL OR EXISTS (
              SELECT 1 FROM confirmations k
               WHERE k.run_id = r.id AND k.proposal_hash = p.proposal_hash),
            p.fingerprint, p.proposal_hash,
            extract(epoch FROM p.created_at)::float8,
            coalesce(jsonb_array_length(p.provenance::jsonb -> 'flagged'), 0) > 0)
          ORDER BY p.step, p.branch), '[]'::jsonb)
     FROM proposals p WHERE p.run_id = r.id) AS proposals,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(c.step, c.branch, c.id, c.tool, c.grant_ids,
            c.effect_key, c.status, o.status, o.resolved_status, o.output, c.confirmation_id)
          ORDER BY c.step, c.branch), '[]'::jsonb)
     FROM commands c
     LEFT JOIN LATERAL (SELECT x.status, x.resolved_status, x.output FROM outcomes x
                         WHERE x.command_id = c.id ORDER BY x.attempt DESC LIMIT 1) o ON true
    WHERE c.run_id = r.id) AS commands,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(o.observation_id, o.source, o.content, o.step)
          ORDER BY o.id), '[]'::jsonb)
     FROM observations o WHERE o.run_id = r.id) AS observations,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(g.id, g.capability, g.resource_scope,
            g.expires_at_step, g.max_uses,
            greatest(0, g.uses - (
              SELECT count(*) FROM commands c
               CROSS JOIN LATERAL jsonb_array_elements_text(c.grant_ids::jsonb) u
               WHERE c.run_id = r.id AND u = g.id::text)),
            g.destinations_from,
            extract(epoch FROM g.expires_at), g.constraints) ORDER BY g.id), '[]'::jsonb)
     FROM grants g WHERE g.run_id = r.id) AS grants,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(c.id, c.proposal_hash, c.tool, c.approved,
            true, c.expires_at_step, extract(epoch FROM c.expires_at), c.covers_run)
          ORDER BY c.created_at), '[]'::jsonb)
     FROM confirmations c WHERE c.run_id = r.id AND c.covers_run AND c.approved) AS covering,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(a.id, a.proposal_hash, a.tool, a.approved_by,
            false) ORDER BY a.id), '[]'::jsonb)
     FROM pre_approvals a WHERE a.run_id = r.id) AS pre_approvals,
  (SELECT coalesce(jsonb_object_agg(t.tool, coalesce(t.reason, '')), '{}'::jsonb)
     FROM tool_switches t WHERE t.disabled) AS disabled
FROM runs r WHERE r.id = ANY(%(ids)s)
"""
)

_RECENT = Compiled.text(
    """
SELECT r.id FROM runs r
 WHERE r.kind <> 'replay' AND r.created_at >= now() - make_interval(secs => %(since_s)s)
   AND EXISTS (SELECT 1 FROM proposals p WHERE p.run_id = r.id)
 ORDER BY r.created_at DESC, r.id LIMIT %(limit)s
"""
)


def read_recorded(conn: Connection, run_ids: Sequence[str]) -> dict[str, RecordedRun]:
    """What each of ``run_ids`` recorded, by run id (a run not found is left out)."""
    rows = _RECORDED.all(conn, {"ids": list(run_ids)})
    return {row.id: _recorded(row) for row in rows}


def recent_run_ids(conn: Connection, *, since_s: float, limit: int) -> list[str]:
    """The runs (not replays) created in the last ``since_s`` seconds that proposed anything,
    newest first, at most ``limit``."""
    return [r.id for r in _RECENT.all(conn, {"since_s": since_s, "limit": limit})]


def _recorded(row: Any) -> RecordedRun:
    return RecordedRun(
        run_id=row.id,
        kind=row.kind,
        source_step=row.source_step,
        status=row.status,
        goal=row.goal,
        subject=row.subject,
        spec=row.spec or {},
        deadline_at=float(row.deadline_at),
        proposals=tuple(
            RecordedProposal(
                step=p[0],
                branch=p[1],
                kind=p[2],
                proposal_id=p[3],
                tool=p[4],
                raw=p[5],
                observation_version=p[6],
                status=p[7],
                code=p[8],
                asked=bool(p[9]),
                fingerprint=p[10],
                proposal_hash=p[11],
                decided_at=float(p[12]),
                provenance_flagged=bool(p[13]),
            )
            for p in row.proposals
        ),
        commands=tuple(
            RecordedCommand(
                step=c[0],
                branch=c[1],
                command_id=c[2],
                tool=c[3],
                grant_ids=tuple(c[4] or ()),
                effect_key=c[5],
                status=(c[7] or c[6]) if c[6] == "completed" else c[6],
                outcome=c[7],
                resolved=c[8],
                output=c[9],
                confirmation_id=c[10],
            )
            for c in row.commands
        ),
        observations=tuple((o[0], o[1], o[2], o[3]) for o in row.observations),
        grants=tuple(grants_from(row.id, row.grants)),
        pre_approvals=tuple(pre_approvals_from(row.pre_approvals)),
        covering=tuple(confirmations_from(row.id, row.covering)),
        disabled=dict(row.disabled or {}),
    )


def load_recorded(engine: Engine, run_ids: Sequence[str]) -> dict[str, RecordedRun]:
    """:func:`read_recorded` on a connection of its own."""
    with autocommit(engine, held=False) as conn:
        return read_recorded(conn, run_ids)


def record_replay(
    engine: Engine,
    source: RecordedRun,
    report: ReplayReport,
    *,
    started_by: str | None = None,
) -> str:
    """The replay as a run of kind ``replay``, finished when written (``completed``,
    ``REPLAYED``), linked to its source; its trace holds each step's two decisions."""
    run_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    events: list[tuple[str, dict[str, Any]]] = [
        ("replay.started", {"source_run_id": source.run_id, "policy": report.policy}),
        *(("replay.step", step.as_dict()) for step in report.steps),
        (
            "replay.finished",
            {"changed": len(report.changed), "steps": len(report.steps), "executed": 0},
        ),
    ]
    with session_scope(engine) as s:
        s.add(
            Run(
                id=run_id,
                kind="replay",
                source_run_id=source.run_id,
                status=RunStatus.COMPLETED.value,
                phase=Phase.IDLE.value,
                goal=source.goal,
                subject=source.subject,
                spec=source.spec,
                deadline_at=now,
                finished_at=now,
                stop_reason=StopReason.REPLAYED.value,
                stop_detail={"changed": len(report.changed), "policy": report.policy},
                started_by=started_by,
                tool_calls_by_tool={},
            )
        )
        s.flush()
        append_events(s, run_id, events, step=0)
    return run_id
