"""MCP client sessions and calls (see :mod:`warrant.tools._mcp`): opening a session, a one-off
call (a session of its own), how a call that returned no result is typed as a tool outcome,
and one long-lived session per stdio server per process.

A :class:`ServerSession` is a tool plug-in's deps object: the worker builds it lazily in the
process that calls the tool (after Celery's fork, never inherited) and closes it at the
process's shutdown. Its session lives on an event loop in a thread of its own (an anyio
blocking portal), so synchronous tool calls share one server process. The server's output is
relayed to the session through a watch that notices the end of the stream at once: a server
that died (killed, crashed) is replaced before the next call is sent; one that dies during a
call ends that call with a lost connection (typed by :func:`classify`),
and any call that did not return a result (timeout, lost connection, interruption) closes the
session, so the next call starts a fresh server.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from celery.exceptions import SoftTimeLimitExceeded

from warrant.runner.errors import ToolFailed, ToolUnknown
from warrant.tools._mcp_config import ServerDeclaration

__all__ = [
    "MAX_MESSAGE",
    "Progress",
    "ServerSession",
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


# --- the long-lived session of a worker process -------------------------------------------

#: How long closing a session may take (the SDK gives a stdio server 2 s to exit on EOF).
_CLOSE_S = 5.0


class _Live:
    """One started session: its owner task's future, the session once initialized, and the
    events that end it (asked to close, or the server's output ended)."""

    def __init__(self) -> None:
        self.session: Any = None
        self.ended = anyio.Event()
        self.close = anyio.Event()
        self.owner: Future[None] | None = None

    @property
    def alive(self) -> bool:
        return not self.ended.is_set() and self.owner is not None and not self.owner.done()


@dataclass
class ServerSession:
    """The process's session to one stdio MCP server, started on first use and restarted
    whenever the previous one ended or failed a call."""

    server: ServerDeclaration
    starts: int = 0
    """Sessions started by this object (one server process each)."""
    _pid: int = field(default_factory=os.getpid)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _portal_cm: AbstractContextManager[BlockingPortal] | None = None
    _portal: BlockingPortal | None = None
    _live: _Live | None = None

    def call(self, name: str, arguments: dict[str, Any], progress: Progress, limit_s: float) -> Any:
        """``tools/call`` on the live session (one is started if none is), bounded by
        ``limit_s`` from now (the start included). Raises what the call raised; any call that
        did not return a result closes the session first."""
        with self._lock:
            portal, live = self._ensure(limit_s)
            future = portal.start_task_soon(self._call, live, name, arguments, progress, limit_s)
            try:
                return future.result()
            except BaseException as exc:  # timeout, lost server, an interruption of this thread
                if not answered(exc):
                    future.cancel()
                    self._end(live, wait=False)  # the next call starts a fresh server
                raise

    def close(self) -> None:
        """Close the session (the server exits on the end of its input) and the loop thread."""
        with self._lock:
            if self._pid != os.getpid():
                return  # inherited across a fork: the parent's to close
            if self._live is not None:
                self._end(self._live)
            if self._portal_cm is not None:
                self._portal_cm.__exit__(None, None, None)
            self._portal_cm = self._portal = None

    # --- inside the lock ----------------------------------------------------------------------

    def _ensure(self, limit_s: float) -> tuple[BlockingPortal, _Live]:
        if self._pid != os.getpid():  # a fork's copy: nothing of the parent's is used
            self._pid, self._portal_cm, self._portal, self._live = os.getpid(), None, None, None
        if self._portal is None:
            self._portal_cm = start_blocking_portal()
            self._portal = self._portal_cm.__enter__()
        if self._live is not None and not self._live.alive:
            self._end(self._live)
        if self._live is None:
            self._live = self._start(self._portal, limit_s)
        return self._portal, self._live

    def _start(self, portal: BlockingPortal, limit_s: float) -> _Live:
        live = portal.call(_Live)  # its events belong to the portal's loop
        ready: Future[None] = Future()
        live.owner = portal.start_task_soon(self._own, live, ready)
        self.starts += 1
        try:
            ready.result(timeout=max(limit_s, 0.01))
        except BaseException:
            self._end(live, wait=False)
            raise
        return live

    def _end(self, live: _Live, *, wait: bool = True) -> None:
        """Close ``live`` (its server exits on the end of its input, else is terminated);
        with ``wait``, wait (bounded) for that, else it goes on in the loop's thread."""
        if self._live is live:
            self._live = None
        if self._portal is None or live.owner is None or live.owner.done():
            return
        self._portal.call(live.close.set)
        if wait:
            try:
                live.owner.result(timeout=_CLOSE_S)
            except BaseException:
                live.owner.cancel()

    # --- on the portal's loop -----------------------------------------------------------------

    async def _own(self, live: _Live, ready: Future[None]) -> None:
        """Hold the session open until asked to close or until the server's output ends."""
        try:
            async with open_session(self.server, ended=live.ended) as session:
                live.session = session
                ready.set_result(None)
                async with anyio.create_task_group() as group:
                    group.start_soon(_cancel_on, live.ended, group.cancel_scope)
                    await live.close.wait()
                    group.cancel_scope.cancel()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            live.ended.set()

    @staticmethod
    async def _call(
        live: _Live, name: str, arguments: dict[str, Any], progress: Progress, limit_s: float
    ) -> Any:
        with anyio.fail_after(max(limit_s, 0.01)):
            async with anyio.create_task_group() as group:
                group.start_soon(_lost_on, live.ended)
                progress.sent = True
                progress.result = await live.session.call_tool(name, arguments)
                group.cancel_scope.cancel()
        return progress.result


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _lost_on(ended: anyio.Event) -> None:
    """Raise if the session ends while a call waits for its answer."""
    await ended.wait()
    raise ConnectionError("the MCP server's session ended during the call")
