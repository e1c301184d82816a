"""The would-be refusals of observe mode, read off the trace (``gate.would_refuse`` events):
grouped by code and tool for ``warrant gate report``, counted for ``/metrics``.

The trace keeps them; no table of their own. Each read scans the ``trace_events`` view (the
whole trace, or the run's records with ``run_id``): an operator's report and a scrape, never
a stage's hot path."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import distinct, func, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from warrant.ledger.models import TraceEvent
from warrant.runner.observe import WOULD_REFUSE

__all__ = ["EXAMPLE_RUNS", "counts", "report"]

#: Example run ids per group in the report.
EXAMPLE_RUNS = 3

_CODE = TraceEvent.details["code"].as_string()
_TOOL = TraceEvent.details["tool"].as_string()
_LAYER = TraceEvent.details["layer"].as_string()


def report(
    s: Session, *, since: datetime | None = None, run_id: str | None = None
) -> list[dict[str, Any]]:
    """One row per (code, tool, layer), most frequent first: ``count``, ``runs`` (distinct),
    ``first_seen``, ``last_seen`` (ISO 8601) and up to :data:`EXAMPLE_RUNS` ``example_runs``."""
    runs = postgresql.array_agg(distinct(TraceEvent.run_id))
    q = (
        select(
            _CODE,
            _TOOL,
            _LAYER,
            func.count(),
            func.count(distinct(TraceEvent.run_id)),
            func.min(TraceEvent.created_at),
            func.max(TraceEvent.created_at),
            runs[1:EXAMPLE_RUNS],
        )
        .where(TraceEvent.event == WOULD_REFUSE)
        .group_by(_CODE, _TOOL, _LAYER)
        .order_by(func.count().desc(), _CODE, _TOOL)
    )
    if since is not None:
        q = q.where(TraceEvent.created_at >= since)
    if run_id is not None:
        q = q.where(TraceEvent.run_id == run_id)
    return [
        {
            "code": code,
            "tool": tool,
            "layer": layer,
            "count": int(n),
            "runs": int(n_runs),
            "first_seen": first.isoformat(),
            "last_seen": last.isoformat(),
            "example_runs": list(examples or []),
        }
        for code, tool, layer, n, n_runs, first, last, examples in s.execute(q)
    ]


def counts(s: Session) -> dict[tuple[str, str], int]:
    """(code, tool) -> would-be refusals, over the whole trace."""
    rows = s.execute(
        select(_CODE, _TOOL, func.count())
        .where(TraceEvent.event == WOULD_REFUSE)
        .group_by(_CODE, _TOOL)
    )
    return {(str(code), str(tool)): int(n) for code, tool, n in rows}
