"""A process's long-lived session to a stdio MCP server (``warrant.tools._mcp_client``), with
the real notes server: one server process for many calls, a dead server replaced before the
next call, a death during a call typed by the tool's side effect, and nothing left at close.
The pipeline's view of the same (through real workers) is in ``test_mcp.py``."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests import mcp_server as notes
from tests.conftest import wait_for
from tests.integration.test_mcp import (
    NOTES_TOOLS,
    context,
    gone,
    stdio_server,
    uid,
    write_config,
)
from warrant.runner.errors import ToolFailed, ToolUnknown
from warrant.tools._contract import ToolContext
from warrant.tools._mcp import McpOutput, ServerDeclaration, mcp_plugins
from warrant.tools._mcp_client import ServerSession

SLOW = {"side_effect": "read", "capability": "notes:read", "timeout_s": 20}
SLOW_WRITE = {**SLOW, "side_effect": "irreversible", "name": "slow_write"}


@pytest.fixture
def notes_tools(tmp_path) -> Iterator[tuple[dict[str, Any], ServerSession, ServerSession, Path]]:
    """The notes tools of two servers on one state: ``notes`` (reads, ``add_note``) and
    ``notes2`` (``slow_add`` as an irreversible write), each with a session as a worker
    builds it (the plug-in's deps), closed at the end."""
    config = {
        "notes": stdio_server(tmp_path, {**NOTES_TOOLS, "slow_add": SLOW}),
        "notes2": stdio_server(tmp_path, {"slow_add": SLOW_WRITE}),
    }
    plugins = mcp_plugins(write_config(tmp_path / "mcp.json", config))
    sessions = []
    for plugin in plugins:
        assert plugin.deps is not None
        sessions.append(plugin.deps(None))  # type: ignore[arg-type]
    tools = {t.name: t for p in plugins for t in p.tools}
    yield tools, sessions[0], sessions[1], tmp_path
    for session in sessions:
        session.close()


def on(session: ServerSession, timeout_s: float = 30.0) -> ToolContext:
    return replace(context(timeout_s), deps=session)


def call(tools: dict[str, Any], name: str, session: ServerSession, **arguments: Any) -> Any:
    tool = tools[name]
    return tool.execute(tool.parse_input(arguments), on(session))


def test_many_calls_share_one_server_process_and_close_ends_it(notes_tools):
    tools, session, _, state = notes_tools
    baseline = len(notes.starts(state))  # the load-time tools/list ran its own server
    outputs = [call(tools, "list_notes", session, prefix=f"p{i}") for i in range(8)]
    assert all(isinstance(o, McpOutput) for o in outputs)
    started = notes.starts(state)[baseline:]
    assert len(started) == 1 and session.starts == 1
    ((pid, parent),) = started
    assert parent == os.getpid()
    assert [a for _, a in notes.calls(state, "list_notes")] == [f"p{i}" for i in range(8)]
    session.close()
    wait_for(lambda: gone(pid), what="the server to exit at close", timeout=15)


def test_the_output_is_stored_once(notes_tools):
    tools, session, _, _ = notes_tools
    title = uid()
    out = call(tools, "add_note", session, title=title, body="b")
    assert out.model_dump(mode="json") == {"structured": {"title": title, "created": True}}


def test_a_killed_server_is_replaced_and_the_next_call_succeeds(notes_tools):
    tools, session, _, state = notes_tools
    call(tools, "list_notes", session)
    ((pid, _),) = notes.starts(state)[-1:]
    os.kill(pid, signal.SIGKILL)
    # reaped only once the session has seen the server's output end
    wait_for(lambda: gone(pid), what="the session to notice the dead server", timeout=15)
    title = uid()
    out = call(tools, "add_note", session, title=title, body="after")
    assert out.structured == {"title": title, "created": True}
    assert notes.notes(state, title) == [(title, "after")]
    assert session.starts == 2 and notes.starts(state)[-1][0] != pid


def _kill_during(state: Path, title: str) -> threading.Thread:
    """Kill the server that serves ``slow_add(title)`` once the call has reached it."""

    def kill() -> None:
        wait_for(lambda: ("slow_add", title) in notes.calls(state, "slow_add"), what="the call")
        os.kill(notes.starts(state)[-1][0], signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("tool", "which", "outcome", "code"),
    [
        ("slow_add", 1, ToolFailed, "MCP_TIMEOUT"),  # a read: failed, retryable
        ("slow_write", 2, ToolUnknown, "MCP_OUTCOME_UNKNOWN"),  # a write: may have happened
    ],
)
def test_a_server_dying_during_a_call(notes_tools, tool, which, outcome, code):
    tools, s1, s2, state = notes_tools
    session = s1 if which == 1 else s2
    call(tools, "list_notes", s1)  # s1's server up: the kill below targets the newest one
    title = uid()
    killer = _kill_during(state, title)
    t0 = time.monotonic()
    with pytest.raises(outcome) as caught:
        call(tools, tool, session, title=title, body="b", delay_s=60)
    killer.join(10)
    assert caught.value.code == code
    assert "connection lost" in str(caught.value)  # noticed at once, not at the time limit
    assert time.monotonic() - t0 < SLOW["timeout_s"]
    if isinstance(caught.value, ToolFailed):
        assert caught.value.retryable
    assert notes.notes(state, title) == []
    after = uid()
    if which == 2:
        call(tools, "slow_write", s2, title=after, body="b", delay_s=0)
    else:
        call(tools, "add_note", s1, title=after, body="b")
    assert notes.notes(state, after) == [(after, "b")]


def test_a_timed_out_call_restarts_the_server(notes_tools):
    tools, session, _, state = notes_tools
    slow = tools["slow_add"]
    with pytest.raises(ToolFailed) as caught:
        slow.execute(
            slow.parse_input({"title": uid(), "body": "b", "delay_s": 60}), on(session, 1.5)
        )
    assert (caught.value.code, caught.value.retryable) == ("MCP_TIMEOUT", True)
    stuck = notes.starts(state)[-1][0]
    assert call(tools, "list_notes", session).structured == {"notes": []}
    assert session.starts == 2 and notes.starts(state)[-1][0] != stuck
    wait_for(lambda: gone(stuck), what="the stuck server to be stopped", timeout=15)


def test_a_server_that_cannot_start_is_a_retryable_failure(tmp_path, notes_tools):
    tools = notes_tools[0]
    server = ServerDeclaration.model_validate(
        {"command": [str(tmp_path / "no-such-binary")], "tools": NOTES_TOOLS}
    )
    session = ServerSession(server)
    try:
        with pytest.raises(ToolFailed) as caught:
            call(tools, "list_notes", session)
        assert (caught.value.code, caught.value.retryable) == ("MCP_SERVER_UNAVAILABLE", True)
    finally:
        session.close()
