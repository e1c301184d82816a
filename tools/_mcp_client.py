"""MCP client sessions and calls: opening a session, a one-off call (a session of its own),
and how a call that returned no result is typed as a tool outcome (see
:mod:`warrant.tools._mcp`; the long-lived sessions of a worker are in
:mod:`warrant.tools._mcp_sessions`)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import httpx
from celery.exceptions import SoftTimeLimitExceeded

from warrant.runner.errors import ToolFailed, ToolUnknown
from warrant.tools._mcp_config import ServerDeclaration

__all__ = [
    "MAX_MESSAGE",
    "Progress",
    "answered",
    "bounded",
    "call_tool",
    "classify",
    "leaves_of",
    "list_tools",
    "open_session",
]

#: Outcome messages are cut to this many characters.
MAX_MESSAGE = 500
_CONNECTION_CLOSED = -32000  # mcp.types.CONNECTION_CLOSED


@functools.cache
def _devnull() -> TextIO:
    return open(os.devnull, "w")  # one per process, never closed


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours, if it is a real file (not pytest's capture)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return _devnull()
    return sys.stderr


@asynccontextmanager
async def open_session(
    server: ServerDeclaration, *, ended: anyio.Event | None = None
) -> AsyncIterator[Any]:
    """An initialized client session to ``server``, closed on exit. With ``ended``, the
    server's messages reach the session through a relay that sets ``ended`` when they stop
    (the server exited or the connection broke)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if server.command is not None:
        params = StdioServerParameters(
            command=server.command[0],
            args=server.command[1:],
            env=dict(server.env) or None,
            cwd=server.cwd,
        )
        transport = stdio_client(params, errlog=_errlog())
    else:
        assert server.url is not None
        transport = streamable_http_client(server.url)
    async with transport as streams, anyio.create_task_group() as group:
        try:
            read = streams[0]
            if ended is not None:
                sink, read = anyio.create_memory_object_stream[Any](0)
                group.start_soon(_relay, streams[0], sink, ended)
            async with ClientSession(read, streams[1]) as session:
                await session.initialize()
                yield session
        finally:
            group.cancel_scope.cancel()


async def _relay(source: Any, sink: Any, ended: anyio.Event) -> None:
    """Forward the transport's messages to the session; set ``ended`` when they stop."""
    try:
        async with sink:
            async for item in source:
                await sink.send(item)
    finally:
        ended.set()


async def list_tools(server: ServerDeclaration) -> dict[str, Any]:
    async with open_session(server) as session:
        tools: dict[str, Any] = {}
        cursor: str | None = None
        while True:
            page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
            tools.update({t.name: t for t in page.tools})
            cursor = page.nextCursor
            if not cursor:
                return tools


@dataclass
class Progress:
    sent: bool = False
    """The ``tools/call`` request may have reached the server."""
    result: Any = None
    """The server's answer, once received (closing the session may still fail after it)."""


async def call_tool(
    server: ServerDeclaration, name: str, arguments: dict[str, Any], progress: Progress
) -> Any:
    async with open_session(server) as session:
        progress.sent = True
        progress.result = await session.call_tool(name, arguments)
        return progress.result


def leaves_of(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves_of(inner)
    else:
        yield exc
        if exc.__cause__ is not None:
            yield from leaves_of(exc.__cause__)


def answered(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's JSON-RPC error answer (its session still works)."""
    from mcp.shared.exceptions import McpError

    return any(
        isinstance(leaf, McpError) and leaf.error.code != _CONNECTION_CLOSED
        for leaf in leaves_of(exc)
    )


def classify(exc: Exception, *, sent: bool, write: bool, where: str) -> BaseException:
    """The typed outcome of a call that did not return a result."""
    from mcp.shared.exceptions import McpError

    leaves = list(leaves_of(exc))
    for leaf in leaves:
        if isinstance(leaf, SoftTimeLimitExceeded):
            return leaf  # Celery's limit (or a cancellation): the tool stage decides
    detail = next((str(leaf) for leaf in leaves if str(leaf)), type(exc).__name__)
    if not sent or any(isinstance(leaf, httpx.ConnectError) for leaf in leaves):
        return ToolFailed(
            f"{where}: server unavailable ({detail})"[:MAX_MESSAGE],
            code="MCP_SERVER_UNAVAILABLE",
            retryable=True,
        )
    for leaf in leaves:
        if isinstance(leaf, McpError) and leaf.error.code != _CONNECTION_CLOSED:
            return ToolFailed(f"{where}: {leaf.error.message}"[:MAX_MESSAGE], code="MCP_TOOL_ERROR")
    timed_out = any(isinstance(leaf, TimeoutError) for leaf in leaves)
    what = "timed out" if timed_out else f"connection lost ({detail})"
    if write:
        return ToolUnknown(
            f"{where}: {what} after the call was sent"[:MAX_MESSAGE], code="MCP_OUTCOME_UNKNOWN"
        )
    return ToolFailed(f"{where}: {what}"[:MAX_MESSAGE], code="MCP_TIMEOUT", retryable=True)


async def bounded(limit_s: float, call: Any) -> Any:
    with anyio.fail_after(limit_s):
        return await call()
