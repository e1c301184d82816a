"""What each page shows, read from the client, and how: one function per live view, returning
the template's context. ``mark`` changes exactly when what the view shows changes (the live
stream sends a new fragment then); each item's ``key`` and ``mark`` let the page replace only
the items that changed, so focus and half-typed text elsewhere stay put.

Templates are Jinja2, autoescaped; every page carries a content security policy that allows
only this server's own files (no external font, script or CDN), no framing, no caching, no
referrer."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from warrant.runner.authz import Action, Identity, allowed
from warrant.runner.codes import RunStatus
from warrant.runner.server.web import session

__all__ = ["HERE", "VIEWS", "clock", "fragment", "handoffs", "inbox", "page", "run", "runs"]

RUNS_PAGE = 50
STATUSES = [s.value for s in RunStatus]


def _mark(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def clock(epoch: float) -> str:
    """``HH:MM:SS UTC`` (the page's script shows local time instead)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def left(epoch: float, now: float | None = None) -> str:
    """How long until ``epoch``, for a page read without its script."""
    seconds = int(epoch - (time.time() if now is None else now))
    if seconds <= 0:
        return "expired"
    if seconds < 120:
        return f"{seconds} s left"
    return f"about {seconds // 60} min left"


def inbox(client: Any, who: Identity, **_: Any) -> dict[str, Any]:
    items = client.pending_confirmations(reveal_sensitive=allowed(who.role, Action.CONFIRM))
    marks = [f"{p.run_id}:{p.version}:{p.proposal_hash}:{len(p.approved_by)}" for p in items]
    grants = client.list_runs(limit=100, status=RunStatus.WAITING_GRANT.value)
    marks += [f"grant:{r.run_id}:{r.version}" for r in grants]
    return {
        "items": items,
        "grants": grants,
        "may_grant": allowed(who.role, Action.GRANT),
        "mark": _mark(marks),
        "keys": marks,
    }


def runs(client: Any, who: Identity, *, status: str | None = None, **_: Any) -> dict[str, Any]:
    status = status if status in STATUSES else None
    found = client.list_runs(limit=RUNS_PAGE, status=status)
    return {
        "runs": found,
        "status": status,
        "statuses": STATUSES,
        "mark": _mark([f"{r.run_id}:{r.version}" for r in found] + [status or ""]),
    }


def run(client: Any, who: Identity, *, run_id: str = "", **_: Any) -> dict[str, Any]:
    info = client.get_run(run_id)
    trace = client.trace(run_id)
    return {
        "run": info,
        "trace": trace,
        "budgets": client.budgets(run_id),
        "mark": _mark([f"{info.version}", f"{len(trace)}"]),
    }


def handoffs(client: Any, who: Identity, **_: Any) -> dict[str, Any]:
    found = client.handoffs(open_only=True)
    return {
        "handoffs": found,
        "may_resolve": allowed(who.role, Action.RESOLVE_HANDOFF),
        "mark": _mark([f"{h['handoff_id']}:{h['resolved_at']}" for h in found]),
    }


#: The live views: name → (loader, fragment template).
VIEWS: dict[str, tuple[Callable[..., dict[str, Any]], str]] = {
    "inbox": (inbox, "_inbox.html"),
    "runs": (runs, "_runs.html"),
    "run": (run, "_run.html"),
    "handoffs": (handoffs, "_handoffs.html"),
}


# --- rendering -------------------------------------------------------------------------------

HERE = Path(__file__).parent

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
env.filters.update(clock=clock, left=left, pretty=_pretty)


def fragment(name: str, context: dict[str, Any]) -> str:
    return env.get_template(name).render(context)


def page(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    who: Identity | None,
    status_code: int = 200,
) -> HTMLResponse:
    """A whole page: the template with who is logged in, what they may do and the form's
    CSRF value."""
    token = session.token_of(request)
    base = {
        "who": who,
        "csrf": session.csrf_for(token) if token and who else "",
        "may_confirm": bool(who and allowed(who.role, Action.CONFIRM)),
        "path": request.url.path,
        "error": None,
        "notice": None,
    }
    html = env.get_template(template).render({**base, **context})
    return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)
