"""The gateway as an MCP server, over stdio or streamable HTTP.

stdio: one client, one session; it proposes as ``--as NAME`` (the process's user is trusted
as a producer would be). Streamable HTTP (``/mcp``): every request carries an API token
(``Authorization: Bearer``) whose role may propose (``producer`` or ``operator``), else
``401``/``403`` in the API's error shape; the token's label is who proposed. Approving is
never the caller's to do: a person confirms with an approver token (inbox, API, CLI).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions

from warrant.runner.authz import Action, require
from warrant.runner.errors import WarrantError
from warrant.runner.server.http.errors import status_for
from warrant.runner.server.mcp_gateway.gateway import Caller, Gateway

__all__ = ["RUN_KEY_HEADER", "build_server", "http_app", "serve_stdio"]

#: The header that continues a run across MCP sessions over HTTP.
RUN_KEY_HEADER = "warrant-run-key"
SERVER_NAME = "warrant"


def build_server(gateway: Gateway, *, stdio_identity: str | None = None) -> Server[Any, Any]:
    server: Server[Any, Any] = Server(
        SERVER_NAME,
        instructions=(
            "Every tool call is a proposal that warrant's gate decides: it may be refused "
            "(the error says why, with a stable code), wait for a person's approval, or run. "
            "An UNKNOWN_EFFECT result means nobody knows yet whether the call took effect."
        ),
    )

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return gateway.list_tools()

    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        ctx = server.request_context
        return await gateway.call(_caller(ctx, stdio_identity), name, arguments or {})

    return server


def _caller(ctx: Any, stdio_identity: str | None) -> Caller:
    request = ctx.request
    if request is None:  # stdio
        by = stdio_identity or "mcp-stdio"
        return Caller(session=ctx.session, by=by, name=by)
    identity = request.scope["state"]["warrant_identity"]
    return Caller(
        session=ctx.session,
        by=identity.label,
        name=identity.name,
        run_key=request.headers.get(RUN_KEY_HEADER) or None,
    )


def _init_options(server: Server[Any, Any]) -> InitializationOptions:
    return server.create_initialization_options(NotificationOptions(), {})


async def serve_stdio(gateway: Gateway, *, identity: str) -> None:
    """Serve one client on this process's stdin/stdout until it closes them."""
    from mcp.server.stdio import stdio_server

    server = build_server(gateway, stdio_identity=identity)
    async with stdio_server() as (read, write):
        await server.run(read, write, _init_options(server))


def http_app(gateway: Gateway, tokens: Any) -> Any:
    """The ASGI app: streamable HTTP at ``/mcp``, each request authenticated by ``tokens``."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(app=build_server(gateway), json_response=False)

    async def mcp_endpoint(scope: Any, receive: Any, send: Any) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        try:
            identity = await anyio.to_thread.run_sync(tokens.authenticate, token)
            require(identity, Action.PROPOSE)
        except WarrantError as exc:
            status = status_for(exc)
            body = {"error": exc.to_dict()}
            extra = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            await JSONResponse(body, status_code=status, headers=extra)(scope, receive, send)
            return
        scope.setdefault("state", {})["warrant_identity"] = identity
        await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    # an ASGI object (not a function): Starlette hands it the raw scope, at exactly /mcp
    endpoint = _Asgi(mcp_endpoint)
    return Starlette(routes=[Route("/mcp", endpoint=endpoint)], lifespan=lifespan)


class _Asgi:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
