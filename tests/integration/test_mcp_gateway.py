"""``warrant mcp serve`` in front of unmodified MCP clients: the ``mcp`` package's client over
stdio, the OpenAI Agents SDK's MCP client over streamable HTTP. Real workers, a real
reconciler; the effects are counted in the demo service."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import wait_for
from tests.integration.test_external_proposals import _as_if_asked_long_ago
from tests.integration.test_http_api import LiveServer
from tests.integration.test_reconciler import settle
from tests.integration.test_tool_execution import DRAFTS, LOOKUP, uid

pytestmark = [pytest.mark.services, pytest.mark.slow]

NOTICES = {"capability": "notices:send"}
TEMPLATE = {
    "goal": "Help the user through their MCP client.",
    "subject": "mcp-user",
    "grants": [LOOKUP, DRAFTS, NOTICES],
    "budgets": {"max_steps": 20, "max_model_calls": 20},
}
CLI = [sys.executable, "-m", "warrant.runner.cli", "mcp", "serve"]


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


@pytest.fixture(scope="module")
def api(client: Any) -> Iterator[str]:
    """The HTTP API, where a person approves."""
    from warrant.runner.server.http import create_app

    with LiveServer(create_app(client=client)) as server:
        yield server.url


@pytest.fixture(scope="module")
def tokens(engine: Any) -> dict[str, str]:
    from warrant.runner.client.tokens import Tokens

    suffix = uuid.uuid4().hex[:6]
    return {
        role: Tokens(engine).create(f"mcp-{role}-{suffix}", role, created_by="tests")[0]
        for role in ("producer", "approver", "viewer")
    }


@pytest.fixture
def template(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(TEMPLATE))
    return path


def _text(result: Any) -> str:
    return result.content[0].text


def _meta(result: Any) -> dict[str, Any]:
    if result.isError:
        return result.structuredContent["warrant"]
    return (result.meta or {})["warrant"]


def _confirm(api: str, token: str, run_id: str, proposal_hash: str) -> None:
    r = httpx.post(
        f"{api}/v1/runs/{run_id}/confirm",
        json={"proposal_hash": proposal_hash},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def test_an_mcp_client_over_stdio(
    template, client, demo, api, tokens, worker, draft_worker, reconciler_worker
):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "--spec", str(template), "--as", "ide-user", "--approval-wait", "60"],
        env=dict(os.environ),
    )
    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    draft_id = uid("d")

    async def session() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            listed = {t.name: t for t in (await mcp.list_tools()).tools}
            hints = listed["lookup"].annotations
            assert (hints.readOnlyHint, hints.destructiveHint, hints.idempotentHint) == (
                True,
                False,
                True,
            )
            notice = listed["send_notice"].annotations
            assert (notice.readOnlyHint, notice.destructiveHint, notice.idempotentHint) == (
                False,
                True,
                False,
            )
            assert listed["save_draft"].annotations.idempotentHint is True
            assert "issue_refund" not in listed  # not granted: not offered (the gate refuses it)

            read = await mcp.call_tool("lookup", {"query": "order 9"})
            assert not read.isError, _text(read)
            assert read.structuredContent["query"] == "order 9"
            run_id = _meta(read)["run_id"]

            outside = await mcp.call_tool(
                "issue_refund", {"order_id": "ord_1", "amount_cents": 100, "currency": "EUR"}
            )
            assert outside.isError and _text(outside).startswith("MISSING_CAPABILITY"), _text(
                outside
            )

            # a write that needs a person: the call waits, a person approves the exact hash
            call = asyncio.ensure_future(
                mcp.call_tool("send_notice", {"recipient": recipient, "body": "Refunded."})
            )
            waiting = await asyncio.to_thread(
                client.wait, run_id, timeout=30, until={"waiting_confirmation"}
            )
            assert waiting.status == "waiting_confirmation", waiting
            proposal_hash = waiting.confirmation_request["proposal_hash"]
            await asyncio.to_thread(_confirm, api, tokens["approver"], run_id, proposal_hash)
            sent = await asyncio.wait_for(call, 60)
            assert not sent.isError, _text(sent)
            assert _meta(sent)["proposal_hash"] == proposal_hash

            demo.set_fault("save_draft", "timeout_after_commit")
            unknown = await mcp.call_tool("save_draft", {"draft_id": draft_id, "content": "x"})
            assert unknown.isError and _text(unknown).startswith("UNKNOWN_EFFECT"), _text(unknown)
            assert _meta(unknown)["outcome"] == "unknown"
            return run_id, _meta(unknown)["step"]

    run_id, step = asyncio.run(asyncio.wait_for(session(), 120))
    assert demo.notice_count(recipient=recipient) == 1
    settle(client, run_id, until=("running",))
    assert client.decision(run_id, step).resolved == "applied"
    assert demo.draft_count(draft_id=draft_id) == 1
    assert client.get_run(run_id).step == step  # lookup, refund (refused), notice, draft


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def gateway_over_http(template: Path, log_path: Path, *, approval_wait_s: float) -> Iterator[int]:
    """``warrant mcp serve --transport http`` on a free port, until the block ends: its port."""
    port = _free_port()
    log = log_path.open("w")
    command = [*CLI, "--spec", str(template), "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--approval-wait", str(approval_wait_s)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "WARRANT_LOG_LEVEL": "WARNING"},
    )
    try:

        def up() -> bool:
            assert proc.poll() is None, log_path.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                return True
            except OSError:
                return False

        wait_for(up, timeout=30, what="gateway listening")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def http_gateway(template: Path, tmp_path: Path) -> Iterator[str]:
    with gateway_over_http(template, tmp_path / "gateway.log", approval_wait_s=1) as port:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.filterwarnings("ignore:Use `streamable_http_client` instead:DeprecationWarning")
def test_the_agents_sdk_mcp_client_over_http(
    http_gateway, client, demo, api, tokens, worker, draft_worker
):
    from agents.mcp import MCPServerStreamableHttp

    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    key = uuid.uuid4().hex

    def server(token: str) -> Any:
        headers = {"Authorization": f"Bearer {token}", "Warrant-Run-Key": key}
        return MCPServerStreamableHttp(
            params={"url": http_gateway, "headers": headers, "timeout": 30},
            name="warrant",
            client_session_timeout_seconds=90,
        )

    async def first_session() -> tuple[str, str]:
        async with server(tokens["producer"]) as mcp:
            names = {t.name for t in await mcp.list_tools()}
            assert {"lookup", "send_notice"} <= names
            read = await mcp.call_tool("lookup", {"query": "order 1"})
            assert not read.isError
            run_id = _meta(read)["run_id"]
            # this gateway waits 1 s for a person: the call returns WAITING_FOR_APPROVAL
            return run_id, await _wait_for_approval(mcp, recipient)

    run_id, proposal_hash = asyncio.run(first_session())
    assert demo.notice_count(recipient=recipient) == 0
    _confirm(api, tokens["approver"], run_id, proposal_hash)

    async def second_session() -> None:
        async with server(tokens["producer"]) as mcp:  # the same run key: the same run
            sent = await mcp.call_tool("send_notice", {"recipient": recipient, "body": "Hi."})
            assert not sent.isError, _text(sent)
            assert _meta(sent)["run_id"] == run_id

    asyncio.run(second_session())
    assert demo.notice_count(recipient=recipient) == 1  # once, though called twice
    r = httpx.post(
        http_gateway,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {tokens['viewer']}"},
    )
    assert (r.status_code, r.json()["error"]["code"]) == (403, "FORBIDDEN")
    r = httpx.post(http_gateway, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert (r.status_code, r.json()["error"]["code"]) == (401, "TOKEN_INVALID")


async def _wait_for_approval(mcp: Any, recipient: str) -> str:
    """A call whose approval does not come within the gateway's wait: WAITING_FOR_APPROVAL."""
    result = await mcp.call_tool("send_notice", {"recipient": recipient, "body": "Hi."})
    assert result.isError and _text(result).startswith("WAITING_FOR_APPROVAL"), _text(result)
    return str(_meta(result)["proposal_hash"])


SESSION_TEMPLATE = {  # only the step budget: the external planner's session defaults do the rest
    "goal": "Help the user through their MCP client.",
    "subject": "mcp-session",
    "grants": [LOOKUP, NOTICES],
    "budgets": {"max_steps": 20},
}


def test_an_mcp_session_on_a_max_steps_only_template_reads_and_waits_for_a_person(
    tmp_path, client, engine, demo, worker, draft_worker
):
    """Issue 50: 19 reads (one repeated) and a write waiting five minutes for a person, in one
    MCP session whose template sets only ``max_steps``: the session lives through all of it."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import sweep

    spec = tmp_path / "session.json"
    spec.write_text(json.dumps(SESSION_TEMPLATE))
    args = [*CLI[1:], "--spec", str(spec), "--as", "ide-user", "--approval-wait", "1"]
    params = StdioServerParameters(command=CLI[0], args=args, env=dict(os.environ))
    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    write = ("send_notice", {"recipient": recipient, "body": "Hello."})

    async def session() -> None:
        async with (
            stdio_client(params) as (read, write_stream),
            ClientSession(read, write_stream) as mcp,
        ):
            await mcp.initialize()
            queries = [f"order {i}" for i in range(1, 19)] + ["order 3"]  # one repeated
            for query in queries:
                found = await mcp.call_tool("lookup", {"query": query})
                assert not found.isError, _text(found)
            run_id = _meta(found)["run_id"]
            waiting = await mcp.call_tool(*write)
            assert _text(waiting).startswith("WAITING_FOR_APPROVAL"), _text(waiting)
            _as_if_asked_long_ago(engine, run_id, waited_s=300)  # five minutes with a person
            sweep(context_for(engine, publisher=RecordingPublisher()))
            assert client.get_run(run_id).status == "waiting_confirmation"  # still alive
            client.confirm(run_id, proposal_hash=_meta(waiting)["proposal_hash"], by="alice")
            sent = await mcp.call_tool(*write)  # the same call again: its outcome
            assert not sent.isError, _text(sent)
            assert _meta(sent)["step"] == 20

    asyncio.run(session())
    assert demo.notice_count(recipient=recipient) == 1
