"""Live pages: ``GET /ui/live/{view}`` is a server-sent event stream of the view's fragment,
sent whenever what it shows changes (a new request, an answered one, a status change).

The server looks once per :data:`DEFAULT_LIVE_INTERVAL_S` (one cheap read per open page) and
sends ``fragment`` only when the view's mark differs from the last one sent. A stream ends
after :data:`DEFAULT_LIVE_MAX_S` (the browser's ``EventSource`` reconnects on its own), and at
once with ``logout`` when the session's token is revoked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from warrant.runner.authz import Action, allowed
from warrant.runner.errors import TokenInvalid, WarrantError
from warrant.runner.server.http.auth import deps
from warrant.runner.server.web import session, views

__all__ = ["DEFAULT_LIVE_INTERVAL_S", "DEFAULT_LIVE_MAX_S", "router"]

DEFAULT_LIVE_INTERVAL_S = 1.0
"""How often an open page's view is read again."""
DEFAULT_LIVE_MAX_S = 300.0
"""How long one stream lasts before the browser reconnects."""
KEEPALIVE_S = 15.0

router = APIRouter(prefix="/ui", include_in_schema=False)

Param = Annotated[str, Query(max_length=200)]


def event(name: str, data: str) -> str:
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    return f"event: {name}\n{lines}\n"


@router.get("/live/{view}")
def live(
    request: Request,
    view: str,
    mark: Param = "",
    run_id: Param = "",
    status: Param = "",
) -> StreamingResponse:
    """The view's fragment each time it changes, for as long as the page is open."""
    session.identity(request)
    if view not in views.VIEWS:
        raise WarrantError(f"no live view {view!r}", code="NOT_FOUND")
    params = {"run_id": run_id} if view == "run" else {"status": status} if view == "runs" else {}
    stream = _stream(request, view, params, last=mark)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def _stream(
    request: Request, view: str, params: dict[str, Any], *, last: str
) -> AsyncIterator[str]:
    loader, template = views.VIEWS[view]
    client, tokens = deps(request).client, deps(request).tokens
    token = session.token_of(request)
    end = time.monotonic() + DEFAULT_LIVE_MAX_S
    quiet_since = time.monotonic()
    yield "retry: 2000\n\n"
    while time.monotonic() < end and not await request.is_disconnected():
        try:
            who = await run_in_threadpool(tokens.authenticate, token)
            context = await run_in_threadpool(loader, client, who, **params)
        except TokenInvalid:
            yield event("logout", "/ui/login")
            return
        except WarrantError as exc:  # the run is gone, the database is away: say so, go on
            context = {"mark": f"error:{exc.code}"}
            if context["mark"] != last:
                yield event("problem", f"{exc.code}: {exc}")
                last = context["mark"]
        if context["mark"] != last:
            may_confirm = allowed(who.role, Action.CONFIRM)
            context.update(who=who, view=view, live=params, may_confirm=may_confirm)
            context["csrf"] = session.csrf_for(token or "")
            yield event("fragment", views.fragment(template, context))
            last, quiet_since = context["mark"], time.monotonic()
        elif time.monotonic() - quiet_since > KEEPALIVE_S:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(DEFAULT_LIVE_INTERVAL_S)
