"""docker-compose.yml cannot drift from the code: services, commands, queues, depends_on.

No Docker engine runs here, so the file is validated structurally against the CLI and the
queue names the code defines.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from warrant.broker.app import app
from warrant.runner.client.roles import ROLES, role_queues, worker_command
from warrant.tools.plugins import registry_for

COMPOSE = yaml.safe_load((Path(__file__).parents[2] / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


_DEFAULT = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``${VAR:-default}`` interpolation, with ``env`` (default: none set)."""
    env = env or {}
    return _DEFAULT.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def _worker_args(command: list[str], env: dict[str, str] | None = None) -> dict[str, str]:
    assert command[0] == "worker", command
    words = [_expand(w, env) for w in command]
    pairs = dict(zip(words[1::2], words[2::2], strict=True))
    return {k.lstrip("-"): v for k, v in pairs.items()}


def _workers() -> dict[str, dict]:
    return {n: s for n, s in SERVICES.items() if (s.get("command") or [])[:1] == ["worker"]}


def _consumed(env: dict[str, str] | None = None) -> tuple[list[str], set[str]]:
    """Every queue the worker services consume (as ``warrant worker`` would resolve them)."""
    consumed: list[str] = []
    roles = set()
    for svc in _workers().values():
        args = _worker_args(svc["command"], env)
        # `warrant worker --tools ''` passes None: every tool of the registry
        tools = args["tools"].split(",") if args.get("tools") else None
        roles.add(args["role"])
        queues = role_queues(args["role"], tools=tools)  # raises on unknown role/tool
        worker_command(args["role"], tools=tools, concurrency=int(args["concurrency"]))
        consumed += queues
    return consumed, roles


def test_every_role_and_every_tool_queue_of_the_registry_is_consumed():
    consumed, roles = _consumed()
    assert roles == {"planner", "policy", "tool", "reconciler"}
    registry = registry_for()  # built-ins, installed plug-ins and WARRANT_TOOLS (the demo)
    assert {"get_weather", "send_message"} <= set(registry.names())
    for tool in registry:
        assert tool.queue in consumed, tool.name
    declared = {q.name for q in app.conf.task_queues}
    assert set(consumed) == declared  # every queue the code declares is consumed
    assert len(consumed) == len(set(consumed))  # no queue consumed by two services


def test_one_generic_tool_worker_whose_queues_come_from_the_environment():
    tool_services = [
        n for n, s in _workers().items() if _worker_args(s["command"])["role"] == "tool"
    ]
    assert tool_services == ["tool"]
    command = SERVICES["tool"]["command"]
    assert "${WARRANT_TOOL_QUEUES:-}" in command
    names = registry_for().names()
    assert _worker_args(command)["tools"] == ""  # default: the whole registry
    consumed, _ = _consumed({"WARRANT_TOOL_QUEUES": "search_public,get_weather"})
    assert [q for q in consumed if q.startswith("tool.")] == [
        "tool.search_public",
        "tool.get_weather",
    ]
    consumed, _ = _consumed({"WARRANT_TOOL_CONCURRENCY": "8"})
    assert sorted(q for q in consumed if q.startswith("tool.")) == sorted(
        f"tool.{n}" for n in names
    )


def test_warrant_worker_with_empty_tools_consumes_every_tool(monkeypatch):
    """What the compose default runs: `warrant worker --role tool --tools ''`."""
    from typer.testing import CliRunner

    from warrant.runner.client.cli import app, stack

    seen: list[list[str]] = []
    monkeypatch.setattr(stack.os, "execv", lambda path, argv: seen.append(list(argv)))
    result = CliRunner().invoke(app, ["worker", "--role", "tool", "--tools", "", "--json"])
    assert result.exit_code == 0, result.output
    queues = seen[0][seen[0].index("-Q") + 1].split(",")
    assert sorted(queues) == sorted({t.queue for t in registry_for()})


def test_infrastructure_health_order_and_singletons():
    for name in ("redis", "postgres"):
        assert "healthcheck" in SERVICES[name] and SERVICES[name]["restart"] == "unless-stopped"
    assert SERVICES["migrate"]["command"] == ["db", "upgrade"]
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    workers = [n for n, s in SERVICES.items() if (s.get("command") or [])[:1] == ["worker"]]
    for name in workers:
        svc = SERVICES[name]
        assert svc["restart"] == "unless-stopped", name
        assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert svc["environment"]["WARRANT_BROKER_URL"].startswith("redis://redis:")
    beats = [n for n, s in SERVICES.items() if s.get("command") == ["beat"]]
    assert beats == ["beat"] and SERVICES["beat"]["deploy"]["replicas"] == 1


def test_flower_is_authenticated_and_persistent_and_tracing_is_optional():
    flower = SERVICES["flower"]
    assert "FLOWER_BASIC_AUTH" in flower["environment"]
    assert "--persistent=True" in flower["entrypoint"]
    assert any(v.endswith(":/data") for v in flower["volumes"])
    assert SERVICES["jaeger"]["profiles"] == ["tracing"]


def test_the_image_entrypoint_is_the_cli():
    dockerfile = (Path(__file__).parents[2] / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["warrant"]' in dockerfile
    for folder in ("runner", "tools", "broker", "ledger"):
        assert f"COPY {folder} ./{folder}" in dockerfile


def test_a_worker_health_check_pings_its_own_container_only():
    """`inspect ping` with no destination succeeds if any worker anywhere answers: each
    container must ping its own node (`<role>@<hostname>`, see
    `warrant.runner.client.roles.worker_command`)."""
    assert worker_command("planner")[worker_command("planner").index("-n") + 1] == "planner@%h"
    workers = [s for s in SERVICES.values() if (s.get("command") or [])[:1] == ["worker"]]
    for svc in workers:
        test = svc["healthcheck"]["test"]
        assert test[0] == "CMD-SHELL"
        words = test[1].split()
        assert words[:5] == ["celery", "-A", "warrant.broker.app", "inspect", "ping"]
        destinations = words[words.index("-d") + 1].split(",")
        # "$$" is compose's escape: the shell sees $HOSTNAME, the container's host name
        assert destinations == [f"{role}@$$HOSTNAME" for role in ROLES]


def test_the_api_and_the_inbox_are_served_after_the_migration():
    from typer.main import get_command

    from warrant.runner.client.cli import app as cli

    serve = SERVICES["serve"]
    assert serve["command"][0] in get_command(cli).commands  # type: ignore[attr-defined]
    port = serve["command"][serve["command"].index("--port") + 1]
    assert serve["ports"] == [f"{port}:{port}"] and "/healthz" in " ".join(
        serve["healthcheck"]["test"]
    )
    assert serve["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
