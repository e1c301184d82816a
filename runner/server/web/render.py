"""Templates (Jinja2, autoescaped) and the headers every page carries: a content security
policy that allows only this server's own files (no external font, script or CDN), no
framing, no caching, no referrer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from warrant.runner.authz import Action, Identity, allowed
from warrant.runner.server.web import session, views

__all__ = ["HERE", "SECURITY_HEADERS", "env", "fragment", "page"]

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
env.filters.update(clock=views.clock, left=views.left, pretty=_pretty)


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
