"""The installable example plug-in (examples/weather_plugin): discovered through its entry
point, and run end to end against its fake service with a per-call confirmation."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from warrant_weather.service import WeatherService, forecast

from tests import facts
from tests.conftest import WorkerProcess
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command
from warrant.runner.canonical import proposal_hash
from warrant.runner.settings import WarrantSettings
from warrant.tools._plugins import build_registry

BUILTIN = {"search_public", "write_artifact", "save_preference", "delegate"}
WEATHER = {"get_weather", "send_message"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Every worker subprocess of this session loads the installed plug-in, so every one of them
# may be handed a weather task (the shared pipeline worker consumes all declared queues):
# they all inherit the service's URL, fixed before any worker starts.
PORT = _free_port()
os.environ["WEATHER_SERVICE_URL"] = f"http://127.0.0.1:{PORT}"


# --- discovery (no services) ---------------------------------------------------------------


def test_the_entry_point_is_discovered():
    registry = build_registry(WarrantSettings(tools=""))
    assert set(registry.names()) >= WEATHER | BUILTIN
    for name in WEATHER:
        tool = registry.get(name, "1")
        assert tool is not None
        plugin = registry.plugin_of(tool)
        assert plugin is not None and plugin.name == "weather"
        assert plugin.source.startswith("entry point 'weather' (warrant_weather:plugin")
        assert "warrant-example-weather" in plugin.source
    send, get = registry.get("send_message", "1"), registry.get("get_weather", "1")
    assert send is not None and get is not None
    assert (send.confirmation, send.capabilities) == ("per-call", ("messages:send",))
    props = get.describe()["inputSchema"]["properties"]
    assert props["city"]["description"].startswith("The city")


def test_entry_points_off_leaves_it_out():
    registry = build_registry(WarrantSettings(tools="", plugin_entry_points=False))
    assert set(registry.names()) == BUILTIN


def _tools_list(**env: str) -> set[str]:
    environ = {k: v for k, v in os.environ.items() if k != "WARRANT_TOOLS"}
    done = subprocess.run(
        [sys.executable, "-m", "warrant.runner.cli", "tools", "list", "--json"],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {t["name"] for t in json.loads(done.stdout)["tools"]}


def test_tools_list_with_and_without_entry_points():
    assert _tools_list(WARRANT_PLUGIN_ENTRY_POINTS="0") == BUILTIN
    assert _tools_list() == BUILTIN | WEATHER


def test_the_deps_factory_reads_the_url_secret_and_the_client_closes():
    from warrant_weather import deps

    from warrant.runner.errors import PluginError
    from warrant.tools._plugins import DepsContext

    ctx = DepsContext(settings=WarrantSettings(), database_url="")
    client = deps(ctx)
    assert str(client.http.base_url).rstrip("/") == os.environ["WEATHER_SERVICE_URL"]
    client.close()
    assert client.http.is_closed
    saved = os.environ.pop("WEATHER_SERVICE_URL")
    try:
        with pytest.raises(PluginError) as caught:
            deps(ctx)
        assert caught.value.code == "SECRET_MISSING"
    finally:
        os.environ["WEATHER_SERVICE_URL"] = saved


def test_the_service_dedups_messages_and_injects_faults():
    from warrant_weather.client import WeatherClient

    from warrant.runner.errors import ToolFailed, ToolRejected

    with WeatherService() as svc, httpx.Client(base_url=svc.url) as http:
        assert http.get("/weather", params={"city": "Oslo"}).json() == forecast("Oslo")
        assert http.get("/weather").status_code == 400
        for _ in range(2):
            sent = http.post(
                "/messages", json={"to": "bob", "text": "hi"}, headers={"Idempotency-Key": "k1"}
            )
            assert sent.status_code in (200, 201)
        assert len(http.get("/messages").json()["messages"]) == 1 == len(svc.messages())
        other = http.post(
            "/messages", json={"to": "bob", "text": "bye"}, headers={"Idempotency-Key": "k1"}
        )
        assert other.status_code == 409
        assert http.post("/faults", json={"mode": "fail", "times": 1}).status_code == 200
        client = WeatherClient(svc.url)
        with pytest.raises(ToolFailed) as failed:
            client.get_weather("Oslo", timeout_s=5)
        assert failed.value.retryable
        assert client.get_weather("Oslo", timeout_s=5)["city"] == "Oslo"
        svc.inject("unavailable", 1, path="/weather")
        with pytest.raises(ToolFailed):
            client.get_weather("Oslo", timeout_s=5)
        with pytest.raises(ToolRejected):
            client.send_message(key="k1", to="bob", text="changed", timeout_s=5)
        client.close()


# --- end to end (real worker, Redis, PostgreSQL) -------------------------------------------


@pytest.fixture(scope="module")
def weather_service() -> Iterator[WeatherService]:
    with WeatherService(port=PORT) as svc:
        yield svc


@pytest.fixture(scope="module")
def weather_worker(
    services: Any, weather_service: WeatherService, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    log: Path = tmp_path_factory.mktemp("logs") / "weather.log"
    proc = WorkerProcess(
        ["planner", "policy", "tool.get_weather", "tool.send_message"],
        name="weather",
        concurrency=2,
        log=log,
        env={"WEATHER_SERVICE_URL": weather_service.url},
    )
    with proc.serving():
        yield proc


def _tool(pid: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": name,
        "tool_version": "1",
        "arguments": arguments,
        "reason_summary": "",
        "source_observation_ids": ["user-1"],
    }


def _spec(subject: str, outputs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "goal": "Tell alice what the weather in Paris is.",
        "subject": subject,
        "planner": {"kind": "fixture", "outputs": outputs},
        "grants": [
            {"capability": "weather:read", "resource_scope": "paris"},
            {"capability": "messages:send", "resource_scope": "alice"},
        ],
        "budgets": {"max_steps": 6, "max_model_calls": 6, "max_tool_calls": 6, "deadline_s": 60},
    }


def _message_text() -> str:
    f = forecast("Paris")
    return f"Paris today: {f['conditions']}, {f['temperature_c']} C."


@pytest.mark.services
@pytest.mark.slow
def test_weather_then_a_confirmed_message_is_sent_once(
    engine: Any, client: Any, weather_service: WeatherService, weather_worker: WorkerProcess
) -> None:
    before = len(weather_service.messages())
    text = _message_text()
    arguments = {"to": "alice", "text": text}
    spec = _spec(
        "weather-confirm",
        [
            _tool("p1", "get_weather", {"city": "Paris"}),
            _tool("p2", "send_message", arguments),
            {"kind": "final", "answer": "Sent.", "citations": ["tool-1", "tool-2"]},
        ],
    )
    run_id = client.start_run(spec)
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.stop_reason) == ("waiting_confirmation", "USER_CONFIRMATION_REQUIRED")
    assert len(weather_service.messages()) == before  # nothing sent before the confirmation
    assert facts.commands(engine, run_id) == 1  # only get_weather
    request = info.confirmation_request
    h = proposal_hash("send_message", "1", arguments)
    assert request["proposal_hash"] == h
    assert request["resource"] == "alice" and request["parameters"]["text"] == "<sensitive>"

    client.confirm(run_id, proposal_hash=h, by="alice")
    done = client.wait(run_id, timeout=30)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.commands(engine, run_id) == 2 and facts.outcomes(engine, run_id) == 2
    names = [e.event for e in facts.events(engine, run_id)]
    assert names.count("confirmation.approved") == 1
    sent = weather_service.messages()[before:]
    assert len(sent) == 1 and (sent[0]["to"], sent[0]["text"]) == ("alice", text)
    with session_scope(engine) as s:
        cmd = s.scalars(
            select(Command).where(Command.run_id == run_id, Command.tool == "send_message")
        ).one()
        assert (cmd.status, cmd.confirmation_id is not None) == ("completed", True)
        assert sent[0]["key"] == cmd.idempotency_token  # the service deduplicates on it
    observations = {o["observation_id"]: o for o in client.observations(run_id)}
    weather = observations["tool-1"]
    assert weather["source"] == "untrusted-content"  # the forecast comes from outside
    assert weather["content"]["output"] == forecast("Paris")


@pytest.mark.services
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fail", "unavailable"])
def test_a_transient_weather_fault_is_retried(
    engine: Any,
    client: Any,
    weather_service: WeatherService,
    weather_worker: WorkerProcess,
    mode: str,
) -> None:
    weather_service.inject(mode, 1, path="/weather")
    spec = _spec(
        f"weather-fault-{mode}",
        [
            _tool("p1", "get_weather", {"city": "Paris"}),
            {"kind": "final", "answer": "Looked it up.", "citations": ["tool-1"]},
        ],
    )
    run_id = client.start_run(spec)
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert info.tool_calls == 2  # the failed attempt counts
    scheduled = facts.events(engine, run_id, "tool.retry.scheduled")
    assert [e.details["attempt"] for e in scheduled] == [2]
    with session_scope(engine) as s:
        cmd = s.scalars(select(Command).where(Command.run_id == run_id)).one()
        assert (cmd.status, cmd.attempts) == ("completed", 2)
