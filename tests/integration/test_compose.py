"""docker-compose.yml cannot drift from the code: services, commands, queues, depends_on.

No Docker engine runs here, so the files are validated structurally: against the Compose
Specification's JSON schema (vendored as tests/compose-spec.json, source URL in its
``$comment``; no network), the CLI, the queue names the code defines and the Dockerfile.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from warrant.broker.app import app
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.runner.stack.roles import ROLES, role_queues, worker_command
from warrant.tools._plugins import registry_for

ROOT = Path(__file__).parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
TRACING = yaml.safe_load((ROOT / "docker-compose.tracing.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
IMAGE = "warrant-runner:local"
#: Seconds a tool worker's grace must leave beyond the longest hard time limit (Celery's warm
#: shutdown reports the outcome and acknowledges the message after the call returns).
STOP_MARGIN_S = 10.0


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
        given = args.get("concurrency")
        worker_command(args["role"], tools=tools, concurrency=int(given) if given else None)
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

    from warrant.runner.cli import app, stack

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


def test_flower_is_authenticated_and_persistent():
    flower = SERVICES["flower"]
    assert "FLOWER_BASIC_AUTH" in flower["environment"]
    assert "--persistent=True" in flower["entrypoint"]
    db = next(a.split("=", 1)[1] for a in flower["entrypoint"] if a.startswith("--db="))
    mounts = [v.split(":", 1)[1] for v in flower["volumes"]]
    assert str(Path(db).parent) in mounts  # the database lives on the volume


def test_the_image_entrypoint_is_the_cli():
    dockerfile = (Path(__file__).parents[2] / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["warrant"]' in dockerfile
    for folder in ("runner", "tools", "broker", "ledger"):
        assert f"COPY {folder} ./{folder}" in dockerfile


def test_a_worker_health_check_pings_its_own_container_only():
    """`inspect ping` with no destination succeeds if any worker anywhere answers: each
    container must ping its own node, the `<role>@<hostname>` its command names (the default,
    `<role>-<pid>@%h`, would not match)."""
    command = worker_command("planner", name="planner@%h")
    assert command[command.index("-n") + 1] == "planner@%h"
    workers = [s for s in SERVICES.values() if (s.get("command") or [])[:1] == ["worker"]]
    for svc in workers:
        words = svc["command"]
        role = words[words.index("--role") + 1]
        assert words[words.index("--hostname") + 1] == f"{role}@%h"
        test = svc["healthcheck"]["test"]
        assert test[0] == "CMD-SHELL"
        words = test[1].split()
        assert words[:5] == ["celery", "-A", "warrant.broker.app", "inspect", "ping"]
        destinations = words[words.index("-d") + 1].split(",")
        # "$$" is compose's escape: the shell sees $HOSTNAME, the container's host name
        assert destinations == [f"{role}@$$HOSTNAME" for role in ROLES]


def test_the_api_and_the_inbox_are_served_after_the_migration():
    from typer.main import get_command

    from warrant.runner.cli import app as cli

    serve = SERVICES["serve"]
    assert serve["command"][0] in get_command(cli).commands  # type: ignore[attr-defined]
    port = serve["command"][serve["command"].index("--port") + 1]
    assert serve["ports"] == [f"{port}:{port}"] and "/healthz" in " ".join(
        serve["healthcheck"]["test"]
    )
    assert serve["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


# --- schema, tracing, volumes, stopping -------------------------------------------------------


def _merged(base: Any, override: Any) -> Any:
    """``docker compose -f base -f override``: mappings merge key by key, the override's
    scalars win (the files use no sequence both of them set)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merged(base[key], value) if key in base else value
        return out
    return override


def _schema_errors(document: Any) -> list[str]:
    schema = json.loads((ROOT / "tests" / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


def test_the_compose_files_are_valid_compose_files():
    assert _schema_errors(COMPOSE) == []
    assert _schema_errors(TRACING) == []
    assert _schema_errors(_merged(COMPOSE, TRACING)) == []
    broken = _merged(COMPOSE, {"services": {"tool": {"stop_grace_periods": "60s"}}})
    assert _schema_errors(broken)  # the schema does catch a misspelt key


def _warrant_services() -> set[str]:
    return {n for n, s in SERVICES.items() if s.get("image") == IMAGE}


def test_without_the_tracing_file_nothing_exports_spans():
    assert "jaeger" not in SERVICES  # no collector that nothing would send to
    for name in _warrant_services():
        env = SERVICES[name]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${OTEL_EXPORTER_OTLP_ENDPOINT:-}", name
        assert _expand(env["OTEL_EXPORTER_OTLP_ENDPOINT"]) == ""  # telemetry stays off
    assert "jaeger" not in json.dumps(COMPOSE)


def test_the_tracing_file_starts_jaeger_and_points_every_warrant_service_at_it():
    jaeger = TRACING["services"]["jaeger"]
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert "profiles" not in jaeger  # the file is the switch: no second one to forget
    merged = _merged(COMPOSE, TRACING)["services"]
    traced = {n for n, s in TRACING["services"].items() if n != "jaeger"}
    assert traced == _warrant_services()  # a new service of the image must be listed there
    for name in traced:
        env = merged[name]["environment"]
        endpoint = _expand(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert endpoint == "http://jaeger:4318", name
        mine = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
        assert (
            _expand(env["OTEL_EXPORTER_OTLP_ENDPOINT"], mine) == mine["OTEL_EXPORTER_OTLP_ENDPOINT"]
        )
        assert merged[name]["depends_on"]["jaeger"] == {"condition": "service_started"}
        assert env["WARRANT_BROKER_URL"] == SERVICES[name]["environment"]["WARRANT_BROKER_URL"]
    port = endpoint.rsplit(":", 1)[1]
    assert f"{port}:{port}" in jaeger["ports"] and "16686:16686" in jaeger["ports"]


def _image_user() -> str:
    users = re.findall(r"^USER\s+(\S+)", DOCKERFILE, flags=re.M)
    assert len(users) == 1, users
    return users[0]


def test_every_volume_of_the_image_is_writable_by_its_user():
    """A new named volume takes the ownership of the image's directory at the mount path:
    without one created and chowned in the image, it is root's and ``warrant`` cannot write."""
    user = _image_user()
    assert user != "root"
    before_user = DOCKERFILE.split(f"USER {user}")[0]
    run = " ".join(re.findall(r"^RUN\s+((?:.*\\\n)*.*)$", before_user, flags=re.M))
    mounts = [
        volume.split(":")[1]
        for name in _warrant_services()
        for volume in SERVICES[name].get("volumes", [])
        if volume.split(":")[0] in COMPOSE["volumes"]  # named volumes, not bind mounts
    ]
    assert mounts, "no named volume on the image: this test checks nothing"
    for path in mounts:
        assert re.search(rf"mkdir -p (\S+ )*{re.escape(path)}( |$)", run), path
        assert re.search(rf"chown {user}:{user} (\S+ )*{re.escape(path)}( |$)", run), path


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _seconds(duration: str) -> float:
    """A compose duration (``1m30s``, ``90s``) in seconds."""
    parts = _DURATION.findall(duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * _UNITS[u] for n, u in parts)


@pytest.mark.parametrize("env", [None, {"WARRANT_TOOL_STOP_GRACE_PERIOD": "5m"}])
def test_a_tool_worker_may_finish_its_longest_tool_call_before_it_is_killed(env):
    """`docker compose stop` waits ``stop_grace_period`` (10 s by default) after SIGTERM before
    SIGKILL; Celery's warm shutdown lets running calls finish, up to their hard time limit."""
    longest = registry_for().max_timeout_s() + HARD_LIMIT_GRACE_S
    grace = SERVICES["tool"]["stop_grace_period"]
    assert grace.startswith("${WARRANT_TOOL_STOP_GRACE_PERIOD:-")
    assert _seconds(_expand(grace, env)) >= longest + STOP_MARGIN_S
