"""docker-compose.yml cannot drift from the code: services, commands, queues, depends_on.

No Docker engine runs here, so the file is validated structurally against the CLI and the
queue names the code defines.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from warrant.broker.app import app
from warrant.runner.stack import ROLES, role_queues, worker_command
from warrant.tools.plugins import registry_for

COMPOSE = yaml.safe_load((Path(__file__).parent.parent / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def _worker_args(command: list[str]) -> dict[str, str]:
    assert command[0] == "worker", command
    pairs = dict(zip(command[1::2], command[2::2], strict=True))
    return {k.lstrip("-"): v for k, v in pairs.items()}


def test_every_role_and_every_tool_queue_has_a_service():
    consumed: list[str] = []
    roles = set()
    for svc in SERVICES.values():
        command = svc.get("command") or []
        if command[:1] == ["worker"]:
            args = _worker_args(command)
            tools = args["tools"].split(",") if "tools" in args else None
            roles.add(args["role"])
            queues = role_queues(args["role"], tools=tools)  # raises on unknown role/tool
            worker_command(args["role"], tools=tools, concurrency=int(args["concurrency"]))
            consumed += queues
    assert roles == {"planner", "policy", "tool", "reconciler"}
    declared = {q.name for q in app.conf.task_queues}
    assert set(consumed) == declared  # every queue the code declares is consumed
    single = {
        _worker_args(s["command"]).get("tools")
        for s in SERVICES.values()
        if (s.get("command") or [])[:1] == ["worker"]
    }
    for tool in registry_for():  # one service per tool queue, scalable with --scale
        assert tool.name in single, tool.name
    assert len(consumed) == len(set(consumed))  # no queue consumed by two services


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
    dockerfile = (Path(__file__).parent.parent / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["warrant"]' in dockerfile
    for folder in ("runner", "tools", "broker", "ledger"):
        assert f"COPY {folder} ./{folder}" in dockerfile


def test_a_worker_health_check_pings_its_own_container_only():
    """`inspect ping` with no destination succeeds if any worker anywhere answers: each
    container must ping its own node (`<role>@<hostname>`, see
    `warrant.runner.stack.worker_command`)."""
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
