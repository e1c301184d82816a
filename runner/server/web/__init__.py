"""The browser pages of ``warrant serve`` under ``/ui``: the approval inbox, the runs, one
run, the handoff queue. Server-rendered (Jinja2) and usable without JavaScript; a small script
of ours adds live updates (server-sent events) and the time left. Nothing is fetched from
anywhere but this server."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from warrant.runner.server.web import live, pages
from warrant.runner.server.web.session import LoginRequired
from warrant.runner.server.web.views import HERE

__all__ = ["install"]


def install(app: FastAPI) -> None:
    """Add the pages, their static files and the login redirect to ``app``."""
    app.include_router(pages.router)
    app.include_router(live.router)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")

    async def login_first(request: Request, exc: Exception) -> RedirectResponse:
        assert isinstance(exc, LoginRequired)
        return RedirectResponse(f"/ui/login?next={quote(exc.next_path)}", status_code=303)

    app.add_exception_handler(LoginRequired, login_first)
