"""``warrant gate report``: observe mode's would-be refusals (``gate.would_refuse``) grouped by
code and tool, read from the ledger (an administrator's command: the database directly)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from warrant.ledger import reads, would_refuse
from warrant.ledger.db import session_scope
from warrant.runner.cli.common import MIN_PREFIX
from warrant.runner.client.retention import parse_cutoff
from warrant.runner.errors import IdAmbiguous, RunNotFound

__all__ = ["gate_report"]


def _whole_run_id(s: Any, key: str) -> str:
    found = reads.ids_by_prefix(s, key, kind="run", min_length=MIN_PREFIX)
    if len(found) > 1:
        raise IdAmbiguous(
            f"{key!r} starts more than one run id: give more characters", matches=found
        )
    if not found:
        raise RunNotFound(f"no run {key}")
    return found[0]


def gate_report(
    engine: Engine, *, since: str | None = None, run: str | None = None
) -> dict[str, Any]:
    """``since``: an ISO 8601 date or datetime, or an age (``24h``, ``7d``; ``INVALID_DATE``);
    ``run``: a whole run id or a unique prefix (``RUN_NOT_FOUND``, ``ID_AMBIGUOUS``). The
    summary: ``total`` and ``groups`` (code, tool, layer, count, runs, first and last seen,
    example runs), most frequent first."""
    cutoff = parse_cutoff(since) if since else None
    with session_scope(engine) as s:
        run_id = _whole_run_id(s, run) if run else None
        groups = would_refuse.report(s, since=cutoff, run_id=run_id)
    return {
        "since": cutoff.isoformat() if cutoff else None,
        "run_id": run_id,
        "total": sum(g["count"] for g in groups),
        "groups": groups,
    }
