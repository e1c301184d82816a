"""MCP servers as tools: a real FastMCP notes server over stdio and streamable HTTP.

Fast tests cover the configuration file and the argument schema; the pipeline tests run real
Celery workers (planner, policy, the MCP tool queues, a reconciler) whose registry comes from
``WARRANT_MCP_CONFIG``, and assert on ledger facts and on the server's own state.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests import mcp_server as notes
from tests.conftest import RECONCILER_ENV, WorkerProcess, wait_for
from warrant.ledger.db import session_scope
from warrant.ledger.models import OutcomeRow
from warrant.runner.errors import PluginError, ServiceUnavailable, ToolFailed, ToolUnknown
from warrant.tools._contract import ToolContext
from warrant.tools._mcp import McpOutput, load_config, mcp_plugins

ROOT = Path(__file__).resolve().parents[2]
READ = {"capability": "notes:read"}
WRITE = {"capability": "notes:write", "resource_scope": "mcp-*"}

# HttpServer.start hands the child an ``open(server.log)`` it never closes in this process
# (to fix there: open it in a ``with``); only that leak is let through, nothing else.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:unclosed file <_io\.BufferedWriter name='[^']*server\.log'>:ResourceWarning"
)


# --- helpers -----------------------------------------------------------------------------------


def stdio_server(state: Path, tools: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": [sys.executable, "-m", "tests.mcp_server"],
        "cwd": str(ROOT),
        "env": {notes.STATE_ENV: str(state)},
        "tools": tools,
    }


def write_config(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"servers": servers}))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class HttpServer:
    """``python -m tests.mcp_server --http PORT`` with its own state directory."""

    state: Path
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @classmethod
    def start(cls, state: Path) -> HttpServer:
        state.mkdir(parents=True, exist_ok=True)
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_server", "--http", str(port)],
            cwd=ROOT,
            env={**os.environ, notes.STATE_ENV: str(state)},
            stdout=subprocess.DEVNULL,
            stderr=open(state / "server.log", "ab"),  # noqa: SIM115
        )
        server = cls(state, port, proc)
        wait_for(lambda: proc.poll() is not None or answers(port), what=f"MCP server :{port}")
        assert proc.poll() is None, f"MCP server exited: see {state / 'server.log'}"
        return server

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def gone(pid: int) -> bool:
    """The process has exited and been reaped (a zombie still counts as there)."""
    return not Path(f"/proc/{pid}").exists()


def context(timeout_s: float = 30.0) -> ToolContext:
    return ToolContext(
        run_id="r",
        command_id="c",
        subject="s",
        idempotency_token="t",
        attempt=1,
        deadline_at=time.time() + timeout_s,
        deps=None,
    )


def call(tool: str, pid: str = "p1", **arguments: Any) -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": tool,
        "tool_version": "1",
        "arguments": arguments,
        "reason_summary": "",
        "source_observation_ids": [],
    }


def spec(outputs: list[dict[str, Any]], grants=(READ, WRITE), **budgets: Any) -> dict[str, Any]:
    return sc.spec(outputs, grants=list(grants), **budgets)


def uid(prefix: str = "mcp") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def outcome_of(engine: Any, run_id: str) -> OutcomeRow:
    with session_scope(engine) as s:
        row = s.query(OutcomeRow).filter_by(run_id=run_id).order_by(OutcomeRow.id.desc()).first()
    assert row is not None, f"no outcome for {run_id}"
    return row


# --- configuration and schema (no services) ---------------------------------------------------

NOTES_TOOLS: dict[str, dict[str, Any]] = {
    "add_note": {
        "side_effect": "idempotent-write",
        "capability": "notes:write",
        "resource_argument": "title",
        "confirmation": "per-call",
        "timeout_s": 5,
        "max_attempts": 1,
    },
    "list_notes": {"side_effect": "read", "capability": "notes:read"},
}
#: ``add_note`` with its effect read back (``get_note``: the note's body is the one given).
CHECKED_ADD: dict[str, Any] = {
    **NOTES_TOOLS["add_note"],
    "name": "add_checked_note",
    "confirmation": "never",
    "verify_with": {
        "tool": "get_note",
        "arguments": {"title": "arguments.title"},
        "expect": {"title": "result.title", "body": "arguments.body"},
    },
}
#: A server tool that answers with a job id: the run waits for the job (issue 33).
EXPORT_TOOL: dict[str, Any] = {
    "side_effect": "idempotent-write",
    "capability": "notes:read",
    "job": {
        "status_tool": "export_status",
        "cancel_tool": "cancel_export",
        "interval_s": 0.2,
        "max_polls": 50,
    },
}


@pytest.mark.parametrize(
    ("servers", "field"),
    [
        ({"a": {"url": "http://x/mcp", "tools": {"t": {"side_effect": "write"}}}}, "side_effect"),
        ({"a": {"url": "http://x/mcp", "tools": {"t": {"side_effect": "read"}}}}, "capability"),
        ({"a": {"tools": {"t": {"side_effect": "read", "capability": "c"}}}}, "exactly one"),
        (
            {"a": {"url": "http://x", "command": ["x"], "tools": {"t": NOTES_TOOLS["list_notes"]}}},
            "exactly one",
        ),
        ({"a": {"url": "ftp://x", "tools": {"t": NOTES_TOOLS["list_notes"]}}}, "servers.a.url"),
        ({"a": {"url": "http://x", "tools": {}}}, "servers.a.tools"),
        (
            {"a": {"url": "http://x", "tools": {"t": {**NOTES_TOOLS["list_notes"], "x": 1}}}},
            "servers.a.tools.t.x",
        ),
        ({"a b": {"url": "http://x", "tools": {"t": NOTES_TOOLS["list_notes"]}}}, "servers.a b"),
        (
            {
                "a": {
                    "url": "http://x",
                    "env": {"K": "v"},
                    "tools": {"t": NOTES_TOOLS["list_notes"]},
                }
            },
            "'env' and 'cwd'",
        ),
    ],
)
def test_an_invalid_config_names_the_file_and_field(tmp_path, servers, field):
    path = write_config(tmp_path / "mcp.json", servers)
    with pytest.raises(PluginError) as caught:
        load_config(path)
    assert caught.value.code == "MCP_CONFIG_INVALID"
    assert str(path) in str(caught.value) and field in str(caught.value)


def test_unreadable_or_malformed_files_are_config_errors(tmp_path):
    for path, text in [(tmp_path / "a.json", "{nope"), (tmp_path / "a.toml", "servers = [")]:
        path.write_text(text)
        with pytest.raises(PluginError) as caught:
            load_config(path)
        assert caught.value.code == "MCP_CONFIG_INVALID" and str(path) in str(caught.value)
    with pytest.raises(PluginError) as caught:
        load_config(tmp_path / "missing.json")
    assert caught.value.code == "MCP_CONFIG_INVALID"


def test_toml_config_and_relative_cwd(tmp_path):
    path = tmp_path / "mcp.toml"
    path.write_text(
        '[servers.notes]\ncommand = ["python", "-m", "x"]\ncwd = "srv"\n'
        '[servers.notes.tools.list_notes]\nside_effect = "read"\ncapability = "notes:read"\n'
    )
    server = load_config(path).servers["notes"]
    assert server.cwd == tmp_path / "srv"
    assert server.tools["list_notes"].capabilities == ("notes:read",)


def test_an_unreachable_server_or_a_missing_tool_stops_loading(tmp_path):
    down = write_config(
        tmp_path / "down.json",
        {"web": {"url": f"http://127.0.0.1:{free_port()}/mcp", "tools": NOTES_TOOLS}},
    )
    with pytest.raises(ServiceUnavailable) as caught:  # exit 3, as any unreachable service
        mcp_plugins(down)
    assert caught.value.code == "MCP_SERVER_UNAVAILABLE" and "web" in str(caught.value)
    missing = write_config(
        tmp_path / "missing.json",
        {"notes": stdio_server(tmp_path, {**NOTES_TOOLS, "nope": NOTES_TOOLS["list_notes"]})},
    )
    with pytest.raises(PluginError) as caught:
        mcp_plugins(missing)
    assert caught.value.code == "MCP_TOOL_MISSING" and "nope" in str(caught.value)
    bad = {"add_note": {**NOTES_TOOLS["add_note"], "resource_argument": "x"}}
    bad_arg = write_config(tmp_path / "bad.json", {"notes": stdio_server(tmp_path, bad)})
    with pytest.raises(PluginError) as caught:
        mcp_plugins(bad_arg)
    assert caught.value.code == "MCP_CONFIG_INVALID"
    assert "'x' is not an argument of add_note" in str(caught.value)


@pytest.fixture(scope="module")
def stdio_tools(tmp_path_factory) -> tuple[dict[str, Any], Path]:
    """The notes tools over stdio, loaded once (only declared tools; ``slow_add`` twice, as a
    read and as a write, under two names)."""
    state = tmp_path_factory.mktemp("stdio-notes")
    declared = {
        **NOTES_TOOLS,
        "slow_add": {"side_effect": "read", "capability": "notes:read", "timeout_s": 3},
    }
    config = {
        "notes": stdio_server(state, declared),
        "notes2": stdio_server(
            state,
            {
                "slow_add": {
                    "side_effect": "irreversible",
                    "capability": "c",
                    "name": "slow_write",
                    "timeout_s": 3,
                }
            },
        ),
    }
    plugins = mcp_plugins(write_config(state / "mcp.json", config))
    assert [(p.name, p.source) for p in plugins] == [
        (f"mcp:{n}", f"MCP server {n} ({state / 'mcp.json'})") for n in ("notes", "notes2")
    ]
    return {t.name: t for p in plugins for t in p.tools}, state


def test_only_declared_tools_are_exposed_with_the_servers_schema(stdio_tools):
    tools, _ = stdio_tools
    assert sorted(tools) == ["add_note", "list_notes", "slow_add", "slow_write"]
    add = tools["add_note"].describe()
    assert add["inputSchema"]["required"] == ["title", "body"]
    assert add["inputSchema"]["additionalProperties"] is False
    assert set(add["inputSchema"]["properties"]) == {"title", "body"}
    assert add["description"].startswith("Add a note")
    assert (add["sideEffect"], add["confirmation"], add["maxAttempts"]) == (
        "idempotent-write",
        "per-call",
        1,
    )
    assert tools["add_note"].queue == "tool.add_note"
    assert tools["add_note"].output_source.value == "untrusted-content"


@pytest.mark.parametrize(
    ("arguments", "error_type", "loc"),
    [
        ({"title": 1, "body": "b"}, "mcp_schema", ("title",)),
        ({"title": "t"}, "mcp_schema", ("body",)),
        ({"title": "t", "body": "b", "admin": True}, "extra_forbidden", ("admin",)),
    ],
)
def test_arguments_are_validated_against_the_input_schema(stdio_tools, arguments, error_type, loc):
    from pydantic import ValidationError

    tool = stdio_tools[0]["add_note"]
    with pytest.raises(ValidationError) as caught:
        tool.parse_input(arguments)
    error = caught.value.errors()[0]
    assert (error["type"], error["loc"]) == (error_type, loc)


def test_valid_arguments_reach_the_server_and_the_resource_is_plain(stdio_tools):
    tools, state = stdio_tools
    title = uid()
    args = tools["add_note"].parse_input({"title": title, "body": "b"})
    assert tools["add_note"].resource(args, "alice") == title
    assert tools["list_notes"].resource(tools["list_notes"].parse_input({}), "alice") == "*"
    out = tools["add_note"].execute(args, context())
    assert isinstance(out, McpOutput)
    assert out.model_dump(mode="json") == {"structured": {"title": title, "created": True}}
    assert notes.notes(state, title) == [(title, "b")]


def test_an_is_error_result_is_a_non_retryable_failure(stdio_tools):
    tools, _ = stdio_tools
    with pytest.raises(ToolFailed) as caught:
        tools["add_note"].execute(
            tools["add_note"].parse_input({"title": " ", "body": ""}), context()
        )
    assert (caught.value.code, caught.value.retryable) == ("MCP_TOOL_ERROR", False)


def test_a_timed_out_read_is_retryable_and_a_timed_out_write_is_unknown(stdio_tools):
    tools, _ = stdio_tools
    slow = {"title": uid(), "body": "b", "delay_s": 30}
    with pytest.raises(ToolFailed) as failed:
        tools["slow_add"].execute(tools["slow_add"].parse_input(slow), context())
    assert (failed.value.code, failed.value.retryable) == ("MCP_TIMEOUT", True)
    t0 = time.monotonic()
    with pytest.raises(ToolUnknown) as unknown:  # bounded by the context's remaining time
        tools["slow_write"].execute(tools["slow_write"].parse_input(slow), context(timeout_s=1.5))
    assert unknown.value.code == "MCP_OUTCOME_UNKNOWN"
    assert time.monotonic() - t0 < 3


def test_a_server_that_cannot_start_is_a_retryable_failure(tmp_path, stdio_tools):
    from warrant.tools._mcp import ServerDeclaration, _Executor

    tool = stdio_tools[0]["add_note"]
    gone = ServerDeclaration.model_validate(
        {"command": [str(tmp_path / "no-such-binary")], "tools": NOTES_TOOLS}
    )
    execute = _Executor("gone", gone, "add_note", gone.tools["add_note"])
    with pytest.raises(ToolFailed) as caught:
        execute(tool.parse_input({"title": "t", "body": "b"}), context())
    assert (caught.value.code, caught.value.retryable) == ("MCP_SERVER_UNAVAILABLE", True)


# --- the real pipeline -------------------------------------------------------------------------


@dataclass
class Stack:
    config: Path
    stdio_state: Path
    web: HttpServer
    doomed: HttpServer
    worker: WorkerProcess
    reconciler: WorkerProcess


@pytest.fixture(scope="module")
def stack(services, stages_to_myself, tmp_path_factory) -> Iterator[Stack]:
    """Two HTTP servers (``web``, and ``doomed`` for the death test), a stdio server, and workers
    whose registry is the MCP config's: planner, policy, the MCP tool queues, a reconciler."""
    from warrant.tools._plugins import _cached

    base = tmp_path_factory.mktemp("mcp")
    stdio_state = base / "stdio"
    stdio_state.mkdir()
    web = HttpServer.start(base / "web")
    doomed = HttpServer.start(base / "doomed")
    config = write_config(
        base / "mcp.json",
        {
            "notes": stdio_server(
                stdio_state,
                {"list_notes": NOTES_TOOLS["list_notes"], "start_export": EXPORT_TOOL},
            ),
            "web": {"url": web.url, "tools": {"add_note": NOTES_TOOLS["add_note"]}},
            "checked": {"url": web.url, "tools": {"add_note": CHECKED_ADD}},
            "doomed": {
                "url": doomed.url,
                "tools": {
                    "slow_add": {
                        "side_effect": "irreversible",
                        "capability": "notes:write",
                        "resource_argument": "title",
                        "timeout_s": 4,
                        "max_attempts": 1,
                    }
                },
            },
        },
    )
    env = {"WARRANT_MCP_CONFIG": str(config)}
    queues = [
        "planner",
        "policy",
        "tool.list_notes",
        "tool.add_note",
        "tool.add_checked_note",
        "tool.slow_add",
        "tool.start_export",
    ]
    logs = base / "logs"
    logs.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WARRANT_MCP_CONFIG", str(config))
        _cached.cache_clear()
        worker = WorkerProcess(queues, name="mcp", env=env, log=logs / "worker.log")
        reconciler = WorkerProcess(
            ["reconciler"],
            name="mcp-reconciler",
            env={**env, **RECONCILER_ENV},
            log=logs / "reconciler.log",
        )
        try:
            worker.wait_ready()
            reconciler.wait_ready()
            yield Stack(config, stdio_state, web, doomed, worker, reconciler)
        finally:
            worker.stop()
            reconciler.stop()
            web.kill()
            doomed.kill()
            _cached.cache_clear()
            if os.environ.get("WARRANT_TEST_SHOW_WORKER_LOG"):
                sys.stderr.write((logs / "worker.log").read_text())


def settle(client: Any, run_id: str, until: set[str], *, timeout: float = 30.0) -> Any:
    """Ask the reconciler for sweeps until the run reaches ``until`` (a deadline, not a sleep)."""
    from warrant.broker.queues import TASK_RECONCILE

    end = time.monotonic() + timeout
    while (info := client.get_run(run_id)).status not in until:
        assert time.monotonic() < end, f"run stuck: {info}"
        client.publisher.app.send_task(TASK_RECONCILE, queue="reconciler")
        client.wait(run_id, timeout=0.7, until=until)
    return info


@pytest.mark.services
@pytest.mark.slow
def test_a_read_over_stdio_completes_and_the_answer_cites_it(engine, client, stack):
    with notes.connect(stack.stdio_state) as conn:
        conn.execute("INSERT OR IGNORE INTO notes VALUES ('retries', 'three, then quarantine')")
    run_id = client.start_run(
        spec([call("list_notes", prefix="ret"), sc.final("Three, then quarantine.", "tool-1")])
    )
    info = client.wait(run_id, timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    obs = {o["observation_id"]: o for o in client.observations(run_id)}
    assert obs["tool-1"]["source"] == "untrusted-content"
    assert obs["tool-1"]["content"]["output"] == {  # once: no text copy, no content blocks
        "structured": {"notes": [{"title": "retries", "body": "three, then quarantine"}]}
    }
    assert outcome_of(engine, run_id).status == "succeeded"
    assert notes.calls(stack.stdio_state, "list_notes") == [("list_notes", "ret")]


@pytest.mark.services
@pytest.mark.slow
def test_the_gateway_offers_upstream_server_tools_and_runs_them_through_the_gate(client, stack):
    """``warrant mcp serve``'s server, with this module's registry (the notes servers' tools),
    in front of an in-memory ``mcp`` client: an upstream read runs on the module's worker."""
    import anyio
    from mcp.shared.memory import create_connected_server_and_client_session

    from warrant.runner.server.mcp_gateway import Gateway, GatewayOptions, build_server
    from warrant.tools._plugins import registry_for

    with notes.connect(stack.stdio_state) as conn:
        conn.execute("INSERT OR IGNORE INTO notes VALUES ('gateway', 'through the gate')")
    template = {k: v for k, v in spec([]).items() if k != "planner"}
    gateway = Gateway(client, registry_for(), GatewayOptions(spec=template))

    async def session() -> Any:
        server = build_server(gateway, stdio_identity="in-memory")
        async with create_connected_server_and_client_session(server) as mcp:
            listed = {t.name: t for t in (await mcp.list_tools()).tools}
            assert listed["list_notes"].annotations.readOnlyHint is True
            assert listed["add_note"].annotations.readOnlyHint is False
            assert listed["list_notes"].inputSchema["properties"]["prefix"]
            return await mcp.call_tool("list_notes", {"prefix": "gate"})

    result = anyio.run(session)
    assert not result.isError, result.content
    assert result.structuredContent == {
        "structured": {"notes": [{"title": "gateway", "body": "through the gate"}]}
    }
    assert ("list_notes", "gate") in notes.calls(stack.stdio_state, "list_notes")


@pytest.mark.services
@pytest.mark.slow
def test_a_confirmed_write_over_http_happens_exactly_once(engine, client, stack):
    title = uid()
    run_id = client.start_run(
        spec([call("add_note", title=title, body="hello"), sc.final("Saved.", "tool-1")])
    )
    info = client.wait(run_id, timeout=60)
    assert info.status == "waiting_confirmation", info
    request = info.confirmation_request
    assert (request["side_effect"], request["resource"]) == ("idempotent-write", title)
    assert notes.calls(stack.web.state, "add_note") == []  # nothing runs before the person says so
    client.confirm(run_id, proposal_hash=request["proposal_hash"], by="alice")
    done = client.wait(run_id, timeout=60)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert notes.notes(stack.web.state, title) == [(title, "hello")]
    assert notes.calls(stack.web.state, "add_note") == [("add_note", title)]
    assert facts.commands(engine, run_id) == 1


@pytest.mark.services
@pytest.mark.slow
def test_a_write_with_a_read_back_tool_has_its_postcondition_checked_on_the_server(
    engine, client, stack
):
    """``verify_with``: after ``add_note`` answers, warrant calls the server's ``get_note``
    with the call's title and compares the body. A note that landed completes the run; one
    the server answered as added but never stored (a ``ghost`` title) fails the
    postcondition: the run goes to a person, and the success is not believed."""
    title = uid()
    run_id = client.start_run(
        spec([call("add_checked_note", title=title, body="kept"), sc.final("Saved.", "tool-1")])
    )
    done = client.wait(run_id, timeout=60)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), done
    assert notes.calls(stack.web.state, "get_note") == [("get_note", title)]
    [checked] = facts.events(engine, run_id, "tool.postcondition.checked")
    assert (checked.details["tool"], checked.details["ok"]) == ("add_checked_note", True)

    ghost = uid("mcp-ghost")
    run_id = client.start_run(
        spec([call("add_checked_note", title=ghost, body="lost"), sc.final("Saved.", "tool-1")])
    )
    lost = client.wait(run_id, timeout=60)
    assert (lost.status, lost.stop_reason) == ("handoff", "TOOL_POSTCONDITION_FAILED"), lost
    assert notes.notes(stack.web.state, ghost) == []  # the server said added; nothing landed
    assert ("get_note", ghost) in notes.calls(stack.web.state, "get_note")
    [checked] = facts.events(engine, run_id, "tool.postcondition.checked")
    assert checked.details["ok"] is False


def test_an_mcp_write_without_a_read_back_is_unverified_and_says_why(stdio_tools, tmp_path):
    from warrant.tools._mcp_config import NO_READ_BACK

    tools, _ = stdio_tools
    add = tools["add_note"]
    assert (add.unverified, add.verify) == (True, None)
    assert add.describe()["unverifiedReason"] == NO_READ_BACK
    assert "unverifiedReason" not in tools["list_notes"].describe()
    checked = write_config(
        tmp_path / "checked.json", {"notes": stdio_server(tmp_path, {"add_note": CHECKED_ADD})}
    )
    [plugin] = mcp_plugins(checked)
    [tool] = plugin.tools
    assert (tool.unverified, tool.describe()["verification"]) == (False, "verify")
    title = uid()
    args = tool.parse_input({"title": title, "body": "b"})
    out = tool.execute(args, context())
    assert tool.verify is not None and tool.verify(args, out, context()) is True
    ghost = tool.parse_input({"title": uid("ghost"), "body": "b"})
    assert tool.verify(ghost, tool.execute(ghost, context()), context()) is False
    wrong = tool.parse_input({"title": title, "body": "other"})  # the body read back differs
    assert tool.verify(wrong, out, context()) is False
    bad = {"add_note": {**CHECKED_ADD, "verify_with": {"tool": "nope"}}}
    with pytest.raises(PluginError) as caught:  # a read-back tool the server lacks
        mcp_plugins(write_config(tmp_path / "bad.json", {"notes": stdio_server(tmp_path, bad)}))
    assert caught.value.code == "MCP_TOOL_MISSING" and "nope" in str(caught.value)
    read = {"list_notes": {**NOTES_TOOLS["list_notes"], "verify_with": {"tool": "get_note"}}}
    with pytest.raises(PluginError) as caught:  # a read has nothing to read back
        load_config(write_config(tmp_path / "read.json", {"notes": stdio_server(tmp_path, read)}))
    assert "'verify_with' applies to a write only" in str(caught.value)


@pytest.mark.services
@pytest.mark.slow
def test_an_undeclared_server_tool_is_refused_and_never_called(engine, client, stack):
    title = uid()
    with notes.connect(stack.web.state) as conn:
        conn.execute("INSERT INTO notes VALUES (?, 'keep me')", (title,))
    run_id = client.start_run(
        spec([call("undeclared_delete", title=title), sc.final("Deleted.", "tool-1")])
    )
    info = client.wait(run_id, timeout=60)
    assert info.status == "failed"
    assert facts.rejection_codes(engine, run_id) == ["UNKNOWN_TOOL_OR_VERSION"]
    assert facts.commands(engine, run_id) == 0
    for state in (stack.web.state, stack.doomed.state, stack.stdio_state):
        assert notes.calls(state, "undeclared_delete") == []
    assert notes.notes(stack.web.state, title) == [(title, "keep me")]


@pytest.mark.services
@pytest.mark.slow
def test_a_server_dying_mid_write_is_an_unknown_outcome_handed_to_a_person(engine, client, stack):
    title = uid()
    write = call("slow_add", title=title, body="b", delay_s=30)
    run_spec = spec([write, sc.final("x", "tool-1")])
    # an irreversible write runs without a person only on a pre-approval of exactly it
    run_spec["pre_approved"] = [
        {
            "tool": "slow_add",
            "tool_version": "1",
            "arguments": write["arguments"],
            "approved_by": "ops",
        }
    ]
    run_id = client.start_run(run_spec)
    wait_for(
        lambda: notes.calls(stack.doomed.state, "slow_add"), what="the call reached the server"
    )
    stack.doomed.kill()  # mid-call: the write's effect cannot be known
    info = client.wait(run_id, timeout=30, until={"reconciling", "failed", "completed"})
    assert (info.status, info.stop_reason) == ("reconciling", "UNKNOWN_EFFECT")
    outcome = outcome_of(engine, run_id)
    assert (outcome.status, outcome.code) == ("unknown", "MCP_OUTCOME_UNKNOWN")
    ev = facts.events(engine, run_id, "effect.reconciliation_required")
    assert [(e.details["trigger"], e.details["recovery"]) for e in ev] == [("adapter", "human")]
    done = settle(client, run_id, {"handoff", "completed", "failed"})
    assert (done.status, done.stop_reason) == ("handoff", "UNKNOWN_EFFECT")
    assert facts.commands(engine, run_id) == 1  # never retried blindly
    assert notes.notes(stack.doomed.state, title) == []


# --- one stdio server per worker process; CLI reads start none ---------------------------------


def reads(n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` list_notes calls with distinct arguments (not a loop)."""
    return [call("list_notes", pid=f"p{i}", prefix=f"{tag}{i}") for i in range(n)]


def run_reads(client: Any, n: int, tag: str) -> str:
    budgets = {
        "max_steps": n + 2,
        "max_tool_calls": n,
        "max_model_calls": n + 2,
        "max_steps_without_new_observation": n + 1,  # the reads all find nothing new
    }
    run_id = client.start_run(spec([*reads(n, tag), sc.final("Done.", "tool-1")], **budgets))
    info = client.wait(run_id, timeout=120)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    return run_id


def serving(state: Path, tag: str) -> list[int]:
    """The pids of the server processes that served the list_notes calls tagged ``tag``."""
    return [pid for args, pid in notes.callers(state, "list_notes") if args.startswith(tag)]


@pytest.mark.services
@pytest.mark.slow
def test_stdio_calls_through_a_worker_share_one_server_per_process(engine, client, stack):
    tag, n = uid("many"), 10
    run_id = run_reads(client, n, tag)
    pids = serving(stack.stdio_state, tag)
    assert len(pids) == n
    parents = dict(notes.starts(stack.stdio_state))
    # at most one server per worker process (the worker has two), whichever took each call
    assert len(set(pids)) <= 2, pids
    assert len({parents[p] for p in set(pids)}) == len(set(pids))
    outputs = [
        o["content"]["output"] for o in client.observations(run_id) if "output" in o["content"]
    ]
    assert len(outputs) == n and all(set(o) == {"structured"} for o in outputs)


@pytest.mark.services
@pytest.mark.slow
def test_a_killed_stdio_server_is_replaced_and_the_next_call_succeeds(engine, client, stack):
    run_reads(client, 2, uid("warm"))
    alive = sorted({p for _, p in notes.callers(stack.stdio_state, "list_notes") if not gone(p)})
    assert alive, "the worker keeps its stdio server between runs"
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    # reaped by the worker process once its session has seen the server's output end
    wait_for(lambda: all(gone(p) for p in alive), what="the worker to notice", timeout=15)
    tag = uid("after-kill")
    run_id = run_reads(client, 1, tag)
    outcome = outcome_of(engine, run_id)
    assert (outcome.status, outcome.attempt) == ("succeeded", 1)  # not a retry: a new server
    assert set(serving(stack.stdio_state, tag)).isdisjoint(alive)


@pytest.mark.services
@pytest.mark.slow
def test_cli_reads_start_no_mcp_server_and_an_unreachable_one_exits_3(client, tmp_path):
    from tests.integration.test_cli import warrant

    state = tmp_path / "state"
    state.mkdir()
    missing = {**NOTES_TOOLS["list_notes"], "name": "missing_list"}
    config = write_config(
        tmp_path / "mcp.json",
        {
            "notes": stdio_server(state, NOTES_TOOLS),
            "missing": {
                "command": [str(tmp_path / "no-such-binary")],
                "tools": {"list_notes": missing},
            },
        },
    )
    env = {"WARRANT_MCP_CONFIG": str(config)}
    run_id = client.start_run(spec([sc.final("x")]))
    for args in (["run", "list"], ["run", "show", run_id], ["run", "view", run_id]):
        done = warrant(*args, "--json", env=env)
        assert done.returncode == 0, (args, done.stderr)
        json.loads(done.stdout)
    assert notes.starts(state) == []  # no server process was started
    listed = warrant("tools", "list", "--json", env=env)  # needs the servers' schemas
    assert listed.returncode == 3, listed.stderr
    assert json.loads(listed.stdout)["error"]["code"] == "MCP_SERVER_UNAVAILABLE"


@pytest.mark.services
@pytest.mark.slow
def test_an_mcp_tool_that_answers_with_a_job_id_is_waited_for_until_the_job_ends(
    engine, client, stack
):
    title = f"export-{uuid.uuid4().hex[:8]}"
    run_id = client.start_run(
        spec([call("start_export", title=title), sc.final("Exported.", "job-1")])
    )
    assert client.wait(run_id, timeout=30, until={"waiting_job"}).status == "waiting_job"
    info = settle(client, run_id, {"completed", "failed", "handoff"}, timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    obs = {o["observation_id"]: o for o in client.observations(run_id)}
    assert obs["tool-1"]["content"]["status"] == "accepted"
    assert obs["tool-1"]["content"]["operation_id"].startswith("ex-")
    assert obs["job-1"]["content"]["output"]["structured"]["state"] == "done"
    assert [(t, s, p, c) for t, s, p, c in notes.exports(stack.stdio_state) if t == title] == [
        (title, "done", 3, 0)
    ]


@pytest.mark.services
@pytest.mark.slow
def test_cancelling_a_run_that_waits_on_an_mcp_job_calls_its_cancel_tool_once(client, stack):
    title = f"stuck-{uuid.uuid4().hex[:8]}"
    run_id = client.start_run(spec([call("start_export", title=title), sc.final("x", "job-1")]))
    assert client.wait(run_id, timeout=30, until={"waiting_job"}).status == "waiting_job"
    client.cancel(run_id, by="ops", reason="not needed")
    info = settle(client, run_id, {"cancelled", "handoff", "failed"}, timeout=40)
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED"), info
    [(_, state, _, cancels)] = [e for e in notes.exports(stack.stdio_state) if e[0] == title]
    assert (state, cancels) == ("cancelled", 1)


@pytest.mark.services
@pytest.mark.slow
def test_stopping_the_worker_stops_its_stdio_servers(client, stack):
    """Last in the module: it stops the module's worker (which could not start again: the
    ``doomed`` server is gone)."""
    run_reads(client, 1, uid("last"))
    alive = sorted({p for _, p in notes.callers(stack.stdio_state, "list_notes") if not gone(p)})
    assert alive
    stack.worker.stop()
    wait_for(lambda: all(gone(p) for p in alive), what="the servers to exit", timeout=15)
