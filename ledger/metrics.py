"""The ledger's figures for ``/metrics``: a handful of aggregate queries, one snapshot.

Cheap by construction where an index serves: runs by status and the confirmations waiting
(``ix_runs_status``), the reconciler's backlog (live runs by status, then their outcomes by
``run_id``; started commands by the partial ``ix_commands_started``), pending webhook deliveries
(``ix_webhook_deliveries_due``). Runs by status, their stop reasons and the cost they spent are
one scan of ``runs``; gate refusals (with the duplicate effects and the provenance layer's
refusals among them, by tool) one of ``proposals``, the provenance layer's flags one more of its
rows that carry provenance; tool outcomes one of ``outcomes``; declined confirmations one of
``confirmations``; observe mode's would-be refusals one of the trace
(:mod:`warrant.ledger.would_refuse`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, case, false, func, literal_column, select
from sqlalchemy.orm import Session, aliased

from warrant.ledger import would_refuse
from warrant.ledger.models import (
    Command,
    Confirmation,
    OutcomeRow,
    Proposal,
    Run,
    WebhookDelivery,
)
from warrant.runner.codes import Rejection, RunStatus

__all__ = ["LATENCY_BUCKETS_MS", "PROVENANCE_REFUSALS", "LedgerMetrics", "ToolLatency", "snapshot"]

#: The provenance layer's refusal codes (``warrant.runner.provenance.refusal``); a call it
#: flags and sends to a person instead is counted as ``UNTRUSTED_ARGUMENT``.
PROVENANCE_REFUSALS = (Rejection.UNTRUSTED_CONTENT.value, Rejection.UNTRUSTED_DESTINATION.value)

#: Upper bounds (ms) of the tool latency histogram's buckets (``+Inf`` is the count).
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    10,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
)


@dataclass(frozen=True)
class ToolLatency:
    count: int
    sum_ms: float
    buckets: tuple[int, ...]
    """Cumulative counts, one per :data:`LATENCY_BUCKETS_MS` bound."""


@dataclass(frozen=True)
class LedgerMetrics:
    runs_by_status: dict[str, int] = field(default_factory=dict)
    refusals_by_code: dict[str, int] = field(default_factory=dict)
    outcomes: dict[tuple[str, str], int] = field(default_factory=dict)
    """(tool, outcome status) -> outcomes."""
    latency: dict[str, ToolLatency] = field(default_factory=dict)
    """Per tool: outcomes with a measured duration."""
    confirmations_waiting: int = 0
    unknown_outcomes: int = 0
    """Unresolved ``unknown`` outcomes that a reconciling or cancelling run waits on."""
    stale_commands: int = 0
    """``started`` commands of live runs past their time limit plus the lease margin."""
    webhooks_pending: int = 0
    would_refuse: dict[tuple[str, str], int] = field(default_factory=dict)
    """(code, tool) -> refusals observe mode let through (``gate.would_refuse``)."""
    routes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(label, decided by, high_risk) -> branches router runs started."""
    misroutes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(expected, routed, high_risk of the routed branch) -> routes of evaluation runs
    (``expected_label``) into another branch."""
    routes_asked: int = 0
    """Router runs' questions to a person (a label under the floor, unknown or not a label)."""
    cost: float = 0.0
    """What every run spent (model and tool calls), in the runs' cost unit."""
    stop_reasons: dict[str, int] = field(default_factory=dict)
    """Ended (or waiting) runs by ``stop_reason``."""
    declined: dict[str, int] = field(default_factory=dict)
    """Tool -> confirmations a person declined."""
    duplicates: dict[str, int] = field(default_factory=dict)
    """Tool -> calls the gate refused ``DUPLICATE_EFFECT`` (the effect not done twice)."""
    provenance: dict[tuple[str, str], int] = field(default_factory=dict)
    """(code, action) -> calls the provenance layer refused (``refused``) or flagged and sent
    to a person (``asked``, code ``UNTRUSTED_ARGUMENT``)."""


def snapshot(s: Session, *, stale_extra_s: float) -> LedgerMetrics:
    """Every figure, read in ``s`` (one transaction: a consistent snapshot if the caller's
    isolation level gives one). ``stale_extra_s``: the reconciler's margin past a command's
    time limit before it is presumed lost."""
    runs, stops, cost = _runs(s)
    refusals, duplicates, provenance = _refusals(s)
    return LedgerMetrics(
        runs_by_status=runs,
        cost=cost,
        stop_reasons=stops,
        refusals_by_code=refusals,
        duplicates=duplicates,
        provenance=provenance | _flags(s),
        declined=_declined(s),
        would_refuse=would_refuse.counts(s),
        **_routes(s),
        outcomes=_outcomes(s),
        latency=_latency(s),
        confirmations_waiting=runs.get(RunStatus.WAITING_CONFIRMATION.value, 0),
        unknown_outcomes=_unknown(s),
        stale_commands=_stale(s, stale_extra_s),
        webhooks_pending=int(
            s.scalar(
                select(func.count())
                .select_from(WebhookDelivery)
                .where(WebhookDelivery.status == literal_column("'pending'"))
            )
            or 0
        ),
    )


def _routes(s: Session) -> dict[str, Any]:
    """Routing (``warrant.runner.routing``): each branch's sub-run keeps its route."""
    route = Run.delegation["route"]
    label, by, risky = route["label"].astext, route["by"].astext, route["high_risk"].astext
    routed = s.execute(
        select(label, by, risky, func.count())
        .where(Run.parent_run_id.is_not(None), route["label"].astext.is_not(None))
        .group_by(label, by, risky)
    )
    expected = route["expected"].astext
    wrong = s.execute(
        select(expected, label, risky, func.count())
        .where(Run.parent_run_id.is_not(None), expected.is_not(None), expected != label)
        .group_by(expected, label, risky)
    )
    parent = aliased(Run)
    asked = s.scalar(
        select(func.count())
        .select_from(Proposal)
        .join(parent, parent.id == Proposal.run_id)
        .where(Proposal.kind == "clarify", parent.spec["planner"]["kind"].astext == "router")
    )
    return {
        "routes": {(str(a), str(b), str(c)): int(n) for a, b, c, n in routed},
        "misroutes": {(str(a), str(b), str(c)): int(n) for a, b, c, n in wrong},
        "routes_asked": int(asked or 0),
    }


def _runs(s: Session) -> tuple[dict[str, int], dict[str, int], float]:
    """Runs by status, by stop reason, and the cost they spent: one scan of ``runs``."""
    rows = s.execute(
        select(
            Run.status, Run.stop_reason, func.count(), func.coalesce(func.sum(Run.cost_used), 0)
        ).group_by(Run.status, Run.stop_reason)
    )
    by_status: dict[str, int] = {}
    stops: dict[str, int] = {}
    cost = 0.0
    for status, reason, n, spent in rows:
        by_status[str(status)] = by_status.get(str(status), 0) + int(n)
        if reason is not None:
            stops[str(reason)] = stops.get(str(reason), 0) + int(n)
        cost += float(spent or 0)
    return by_status, stops, cost


def _refusals(
    s: Session,
) -> tuple[dict[str, int], dict[str, int], dict[tuple[str, str], int]]:
    """Gate refusals by code; of them, the duplicate effects by tool and the provenance
    layer's by code: one scan of ``proposals``."""
    rows = s.execute(
        select(Proposal.rejection_code, Proposal.tool, func.count())
        .where(Proposal.rejection_code.is_not(None))
        .group_by(Proposal.rejection_code, Proposal.tool)
    )
    by_code: dict[str, int] = {}
    duplicates: dict[str, int] = {}
    provenance: dict[tuple[str, str], int] = {}
    for code, tool, n in rows:
        by_code[str(code)] = by_code.get(str(code), 0) + int(n)
        if code == Rejection.DUPLICATE_EFFECT.value:
            duplicates[str(tool)] = duplicates.get(str(tool), 0) + int(n)
        elif code in PROVENANCE_REFUSALS:
            key = (str(code), "refused")
            provenance[key] = provenance.get(key, 0) + int(n)
    return by_code, duplicates, provenance


def _flags(s: Session) -> dict[tuple[str, str], int]:
    """Calls the provenance layer flagged and sent to a person (their proposal keeps what it
    found: ``flagged``, the arguments only untrusted content supplied)."""
    flagged = Proposal.provenance["flagged"]
    some = case(
        (func.jsonb_typeof(flagged) == "array", func.jsonb_array_length(flagged) > 0),
        else_=false(),
    )
    n = s.scalar(
        select(func.count()).select_from(Proposal).where(Proposal.provenance.is_not(None), some)
    )
    return {(Rejection.UNTRUSTED_ARGUMENT.value, "asked"): int(n)} if n else {}


def _declined(s: Session) -> dict[str, int]:
    """Confirmations a person declined, by tool."""
    rows = s.execute(
        select(Confirmation.tool, func.count())
        .where(Confirmation.approved.is_(False))
        .group_by(Confirmation.tool)
    )
    return {str(tool): int(n) for tool, n in rows}


def _outcomes(s: Session) -> dict[tuple[str, str], int]:
    rows = s.execute(
        select(Command.tool, OutcomeRow.status, func.count())
        .join(Command, Command.id == OutcomeRow.command_id)
        .group_by(Command.tool, OutcomeRow.status)
    )
    return {(str(tool), str(status)): int(n) for tool, status, n in rows}


def _latency(s: Session) -> dict[str, ToolLatency]:
    duration = OutcomeRow.duration_ms
    buckets = [func.count().filter(duration <= bound) for bound in LATENCY_BUCKETS_MS]
    rows = s.execute(
        select(Command.tool, func.count(), func.coalesce(func.sum(duration), 0.0), *buckets)
        .join(Command, Command.id == OutcomeRow.command_id)
        .where(duration.is_not(None))
        .group_by(Command.tool)
    )
    return {
        str(tool): ToolLatency(int(n), float(total or 0), tuple(int(b) for b in counts))
        for tool, n, total, *counts in rows
    }


def _unknown(s: Session) -> int:
    live = (RunStatus.RECONCILING.value, RunStatus.CANCELLING.value)
    return int(
        s.scalar(
            select(func.count())
            .select_from(OutcomeRow)
            .join(
                Run,
                and_(Run.id == OutcomeRow.run_id, Run.active_command_id == OutcomeRow.command_id),
            )
            .where(
                Run.status.in_(live),
                OutcomeRow.status == "unknown",
                OutcomeRow.resolved_status.is_(None),
            )
        )
        or 0
    )


def _stale(s: Session, extra_s: float) -> int:
    live = (RunStatus.RUNNING.value, RunStatus.CANCELLING.value)
    return int(
        s.scalar(
            select(func.count())
            .select_from(Command)
            .join(Run, Run.id == Command.run_id)
            .where(
                Command.status == literal_column("'started'"),
                Command.started_at
                + func.make_interval(0, 0, 0, 0, 0, 0, Command.timeout_s + extra_s)
                < func.now(),
                Run.status.in_(live),
            )
        )
        or 0
    )
