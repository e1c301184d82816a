"""``warrant serve``: the HTTP API (:mod:`warrant.runner.server.http`) under uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from warrant.runner.cli.common import JsonOpt, guard
from warrant.runner.server.http import create_app

__all__ = ["serve"]


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    as_json: JsonOpt = False,
) -> None:
    """Serve the HTTP API (/v1, /metrics, /healthz; OpenAPI at /openapi.json and /docs) and
    the approval inbox for browsers (/ui).

    Callers present API tokens (`warrant token create NAME --role ROLE`); in a browser, the
    token is entered once on /ui/login."""
    app = guard(as_json, create_app)
    import uvicorn

    # Open live pages (server-sent events) must not hold a shutdown: they reconnect.
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
