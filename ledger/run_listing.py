"""``warrant run list`` without SQLAlchemy: one query through psycopg alone.

Importing SQLAlchemy and the ledger's models costs a short-lived command about half a second
on a small machine, more than the rest of ``run list`` together (``make bench-cli``). This
module reads the same rows as :func:`warrant.ledger.reads.runs` and returns them in the shape
of ``RunInfo.to_dict()`` (``tests/integration/test_cli.py`` checks both agree), with the same
connection timeouts as every engine (:mod:`warrant.ledger.connect_options`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from warrant.ledger.connect_options import libpq_url, timeout_args
from warrant.runner.codes import BUDGET_STOPS
from warrant.runner.errors import ServiceUnavailable, SettingsInvalid
from warrant.runner.settings import WarrantSettings, load_settings
from warrant.runner.spec import granted_capabilities

__all__ = ["COLUMNS", "newest_runs"]

#: ``runs`` columns, in ``RunInfo``'s order, as the keys it uses.
COLUMNS = {
    "id": "run_id",
    "status": "status",
    "phase": "phase",
    "stop_reason": "stop_reason",
    "step": "step",
    "model_calls": "model_calls",
    "tool_calls": "tool_calls",
    "version": "version",
    "answer": "answer",
    "goal": "goal",
    "subject": "subject",
    "created_at": "created_at",
    "finished_at": "finished_at",
    "idempotency_key": "idempotency_key",
    "started_by": "started_by",
    "trace_id": "trace_id",
    "tokens_used": "tokens_used",
    "cost_used": "cost_used",
    "parent_run_id": "parent_run_id",
    "kind": "kind",
    "source_run_id": "source_run_id",
    "source_step": "source_step",
}

WAITING_GRANT = "waiting_grant"
"""``RunStatus.WAITING_GRANT``: its ``stop_detail`` is the run's ``waiting_for_grant``."""


def newest_runs(
    url: str, *, limit: int, status: str | None = None, settings: WarrantSettings | None = None
) -> list[dict[str, Any]]:
    """The newest runs first (only those at ``status``, if given), as ``RunInfo.to_dict()``."""
    where = "WHERE status = %(status)s " if status else ""
    query = (
        # fixed column names, values bound
        f"SELECT {', '.join(COLUMNS)}, stop_detail, spec -> 'grants' AS grants FROM runs {where}"
        "ORDER BY created_at DESC LIMIT %(limit)s"
    )
    if not url.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
        raise SettingsInvalid(f"WARRANT_DATABASE_URL is not a PostgreSQL URL: {url!r}")
    options = timeout_args(url, settings or load_settings())
    try:
        with psycopg.connect(libpq_url(url), **options, row_factory=dict_row) as conn:
            rows = conn.execute(query, {"status": status, "limit": limit}).fetchall()
    except psycopg.ProgrammingError as exc:  # libpq refused the URL itself
        raise SettingsInvalid(f"WARRANT_DATABASE_URL is not a database URL: {exc}") from exc
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServiceUnavailable(
            f"cannot reach the ledger database: {first}", code="DATABASE_UNAVAILABLE"
        ) from exc
    return [_shown(row) for row in rows]


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    shown = {key: row[column] for column, key in COLUMNS.items()}
    shown["created_at"] = row["created_at"].isoformat()
    shown["finished_at"] = row["finished_at"].isoformat() if row["finished_at"] else None
    shown["cost_used"] = round(row["cost_used"] or 0.0, 6)
    waiting = dict(row["stop_detail"] or {}) if row["status"] == WAITING_GRANT else None
    budget = dict(row["stop_detail"] or {}) if row["stop_reason"] in BUDGET_STOPS else None
    return {
        **shown,
        "confirmation_request": None,
        "pre_approvals": [],
        "waiting_for_grant": waiting,
        "capabilities": granted_capabilities({"grants": row["grants"]}),
        "children": [],  # as in RunInfo lists: only ``get_run`` fills them
        "budget_stop": budget,  # as RunInfo.budget_stop
    }
