"""The pieces of issue 47 that need no service: one thread per command in a process, waits
that an interruption ends (``ToolContext.sleep``, ``warrant.tools.blocking``'s sockets and
HTTP client, on a real local socket that never answers), and which outcomes are abandoned."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from warrant.broker.tool import _attempt_watch as attempt_watch
from warrant.runner.codes import Outcome
from warrant.runner.errors import ToolInterrupted
from warrant.runner.tool_outcomes import ToolResult
from warrant.tools._context import ToolContext
from warrant.tools.blocking import connect, http_client


def _context(*, deadline_in_s: float = 30.0) -> ToolContext:
    return ToolContext(
        run_id="r",
        command_id="c",
        subject="s",
        idempotency_token="t",
        attempt=1,
        deadline_at=time.time() + deadline_in_s,
        deps=None,
    )


@pytest.fixture
def silent_server() -> Iterator[tuple[str, int]]:
    """A TCP server that accepts and never answers: a read on it blocks until it is cut."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[:2]
    finally:
        stop.set()
        thread.join(2)
        for s in accepted:
            s.close()
        server.close()


def _interrupt_after(ctx: ToolContext, seconds: float) -> None:
    threading.Timer(seconds, ctx.interrupt.set).start()


def test_a_second_thread_of_the_process_does_not_take_a_held_command() -> None:
    seen: list[bool] = []
    inside, leave = threading.Event(), threading.Event()

    def first() -> None:
        with attempt_watch.taken_here("cmd-1", worker="w") as mine:
            seen.append(mine)
            inside.set()
            leave.wait(5)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(5)
    with attempt_watch.taken_here("cmd-1", worker="w") as mine:
        assert mine is False  # the first thread has it: this delivery leaves it alone
        assert attempt_watch.live_here("cmd-1", worker="w")
    with attempt_watch.taken_here("cmd-1", worker="another") as mine:
        assert mine is True  # another worker label (a simulated second host) is not held
    leave.set()
    thread.join(5)
    assert seen == [True]
    with attempt_watch.taken_here("cmd-1", worker="w") as mine:
        assert mine is True  # released with the first thread's block
        assert not attempt_watch.live_here("cmd-1", worker="w")  # its own hold does not count


def test_sleep_ends_at_once_when_the_call_is_interrupted() -> None:
    ctx = _context()
    _interrupt_after(ctx, 0.2)
    began = time.monotonic()
    with pytest.raises(ToolInterrupted):
        ctx.sleep(30)
    assert time.monotonic() - began < 2


def test_a_socket_read_ends_when_the_call_is_interrupted(silent_server: tuple[str, int]) -> None:
    ctx = _context()
    sock = connect(ctx, silent_server)
    _interrupt_after(ctx, 0.2)
    began = time.monotonic()
    assert sock.recv(1) == b""  # shut down under the blocked read
    assert time.monotonic() - began < 2
    sock.close()


def test_an_http_read_ends_with_tool_interrupted(silent_server: tuple[str, int]) -> None:
    ctx = _context()
    host, port = silent_server
    _interrupt_after(ctx, 0.3)
    began = time.monotonic()
    with http_client(ctx) as http, pytest.raises(ToolInterrupted):
        http.get(f"http://{host}:{port}/")
    assert time.monotonic() - began < 2


def test_an_http_read_times_out_at_the_attempts_deadline(silent_server: tuple[str, int]) -> None:
    ctx = _context(deadline_in_s=0.5)
    host, port = silent_server
    began = time.monotonic()
    with http_client(ctx) as http, pytest.raises(ToolInterrupted, match="deadline"):
        http.get(f"http://{host}:{port}/")
    assert 0.4 < time.monotonic() - began < 2


@pytest.mark.parametrize(
    ("status", "code", "abandoned"),
    [
        (Outcome.SUCCEEDED, None, False),
        (Outcome.REJECTED, "REQUEST_REFUSED", False),
        (Outcome.FAILED, "SERVICE_UNAVAILABLE", False),
        (Outcome.FAILED, "TOOL_TIMEOUT", True),
        (Outcome.FAILED, "CANCELLED_DURING_EXECUTION", True),
        (Outcome.UNKNOWN, "SERVICE_TIMEOUT", True),
    ],
)
def test_which_outcomes_keep_their_slot(status: Outcome, code: Any, abandoned: bool) -> None:
    assert ToolResult(status, code).abandoned is abandoned
