"""One long-lived MCP client session per stdio server per process (see :mod:`warrant.tools._mcp`).

A :class:`ServerSession` is a tool plug-in's deps object: the worker builds it lazily in the
process that calls the tool (after Celery's fork, never inherited) and closes it at the
process's shutdown. Its session lives on an event loop in a thread of its own (an anyio
blocking portal), so synchronous tool calls share one server process. The server's output is
relayed to the session through a watch that notices the end of the stream at once: a server
that died (killed, crashed) is replaced before the next call is sent; one that dies during a
call ends that call with a lost connection (typed by :func:`~warrant.tools._mcp_client.classify`),
and any call that did not return a result (timeout, lost connection, interruption) closes the
session, so the next call starts a fresh server.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from warrant.tools._mcp_client import Progress, answered, open_session
from warrant.tools._mcp_config import ServerDeclaration

__all__ = ["ServerSession"]

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
