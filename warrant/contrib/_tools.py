"""What both adapters do with a decision, and which tools they offer."""

from __future__ import annotations

import json
from typing import Any

from warrant.runner.client.contract import RunnerClient
from warrant.runner.client.external_calls import ExternalCalls, newest_tools
from warrant.runner.external import Decision, explain
from warrant.tools._contract import Tool
from warrant.tools._plugins import registry_for
from warrant.tools._registry import Registry

__all__ = ["failure_text", "gate_calls", "offered", "output_text", "succeeded"]


def gate_calls(
    client: RunnerClient, registry: Registry | None, *, decision_wait_s: float
) -> tuple[ExternalCalls, Registry]:
    """The adapters' calls through the gate, on ``registry`` (default: this deployment's)."""
    if registry is None:
        registry = registry_for()
    return ExternalCalls(client, registry, decision_wait_s=decision_wait_s), registry


def offered(registry: Registry, names: list[str] | None) -> list[Tool[Any, Any]]:
    """The newest version of each tool named (every tool of the registry if None); an unknown
    name is an error now, not a refusal later."""
    newest = newest_tools(registry)
    if names is None:
        return [newest[n] for n in sorted(newest)]
    missing = [n for n in names if n not in newest]
    if missing:
        raise ValueError(f"no such tool in the registry: {', '.join(missing)}")
    return [newest[n] for n in names]


def succeeded(d: Decision) -> bool:
    return d.state == "executed" and d.outcome == "succeeded"


def output_text(d: Decision) -> str:
    return json.dumps(d.output, sort_keys=True)


def failure_text(d: Decision) -> str:
    """What the model reads for anything but a success: the stable code first (an unknown
    effect says ``UNKNOWN_EFFECT``: never a success, never a plain failure)."""
    code, message = explain(d)
    return f"{code}: {message}"
