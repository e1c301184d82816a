"""Blocking I/O that the worker can interrupt: what a tool on the threads pool calls services
with.

A tool call on the ``tool`` role's threads pool is interrupted (its run cancelled, its deadline
passed, its lease lost) by an exception raised in its thread, which Python delivers only
between bytecodes: a thread blocked in a socket read or a plain ``time.sleep`` runs on until
the service answers or its own timeout ends. What goes through the call's context does not:

* :func:`http_client`: an ``httpx.Client`` whose every request is bounded by the attempt's
  deadline (``ToolContext.remaining_s``) and whose connections are shut down the moment the
  worker interrupts the call, so a read blocked on the socket returns at once and the call
  ends with :class:`~warrant.runner.errors.ToolInterrupted` (as does a read that times out
  at the deadline: typed as the call's time limit, ``TOOL_TIMEOUT``, not a tool error);
* :func:`connect`: a TCP socket with the same two properties, for other protocols;
* ``ToolContext.sleep`` for waiting, ``ToolContext.on_interrupt`` for anything else that can
  be unblocked from another thread (a database driver's ``cancel()``, a queue's close).

A tool that blocks where none of these reach is detected: its call outlives the interruption
by more than ``broker.tool._attempt_watch.UNREACHED_AFTER_S``, which is logged and traced
(``tool.interrupt.unreached``). Such a tool belongs on the process pool
(``isolation="process"``), where a signal or the pool ends it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterable
from typing import Any

import httpcore
import httpx

from warrant.runner.errors import ToolInterrupted
from warrant.tools._contract import ToolContext

__all__ = ["connect", "http_client"]


def _shut(sock: socket.socket) -> Callable[[], None]:
    def shut() -> None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)

    return shut


def connect(ctx: ToolContext, address: tuple[str, int]) -> socket.socket:
    """A TCP connection to ``address`` for this call: connect and every read or write time
    out at the attempt's deadline (set when connecting; ``settimeout`` again to narrow it),
    and the socket is shut down when the worker interrupts the call (a blocked read returns
    at once; check ``ctx.interrupt.is_set()`` or let the worker's interruption follow)."""
    if ctx.interrupt.is_set():
        raise ToolInterrupted("the worker interrupted the call")
    sock = socket.create_connection(address, timeout=max(0.001, ctx.remaining_s()))
    ctx.on_interrupt(_shut(sock))
    return sock


class _Stream(httpcore.NetworkStream):
    """A connection of :func:`http_client`: shut down on interruption, and a read or write it
    breaks raises :class:`ToolInterrupted` rather than a protocol error."""

    def __init__(self, ctx: ToolContext, inner: httpcore.NetworkStream) -> None:
        self.ctx, self.inner = ctx, inner
        sock = inner.get_extra_info("socket")
        self.undo = ctx.on_interrupt(_shut(sock)) if sock is not None else (lambda: None)

    def _checked(self, call: Callable[[], Any]) -> Any:
        try:
            result = call()
        except Exception as exc:
            if self.ctx.interrupt.is_set():
                raise ToolInterrupted("the worker interrupted the call") from None
            if isinstance(exc, httpcore.TimeoutException) and self.ctx.remaining_s() <= 0.01:
                raise ToolInterrupted("the call reached its deadline") from None
            raise
        if not result and self.ctx.interrupt.is_set():
            raise ToolInterrupted("the worker interrupted the call")
        return result

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return bytes(self._checked(lambda: self.inner.read(max_bytes, timeout)))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        def written() -> bool:
            self.inner.write(buffer, timeout)
            return True

        self._checked(written)

    def close(self) -> None:
        self.undo()
        self.inner.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _Stream(self.ctx, self.inner.start_tls(*args, **kwargs))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, ctx: ToolContext) -> None:
        self.ctx, self.inner = ctx, httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        if self.ctx.interrupt.is_set():
            raise ToolInterrupted("the worker interrupted the call")
        inner = self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(self.ctx, inner)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self.ctx, self.inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self.ctx.sleep(seconds)


def http_client(ctx: ToolContext, **kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` for this call (close it, or use it as a context manager): each
    request times out at the attempt's deadline (a shorter ``timeout`` of the request's own
    still applies; there is no other default), and its connections are shut down when the
    worker interrupts the call, which then raises
    :class:`~warrant.runner.errors.ToolInterrupted`. ``kwargs`` go to ``httpx.Client`` (not
    ``transport``)."""
    transport = httpx.HTTPTransport()
    # httpx builds its connection pool itself; the pool's network backend is the one place
    # every socket it opens passes through.
    transport._pool._network_backend = _Backend(ctx)

    def bound(request: httpx.Request) -> None:
        left = max(0.001, ctx.remaining_s())
        given = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {
            phase: left if given.get(phase) is None else min(left, given[phase])
            for phase in ("connect", "read", "write", "pool")
        }

    kwargs.setdefault("timeout", None)  # httpx's own 5 s default would cut a longer deadline
    hooks = kwargs.pop("event_hooks", {})
    hooks = {**hooks, "request": [bound, *hooks.get("request", [])]}
    return httpx.Client(transport=transport, event_hooks=hooks, **kwargs)
