"""What both adapters do with a decision, and which tools they offer."""

from __future__ import annotations

import json
from typing import Any

from warrant.runner.client.external_calls import version_key
from warrant.runner.external import Decision
from warrant.tools.contract import Tool
from warrant.tools.registry import Registry

__all__ = ["failure_text", "offered", "output_text", "succeeded"]


def offered(registry: Registry, names: list[str] | None) -> list[Tool[Any, Any]]:
    """The newest version of each tool named (every tool of the registry if None); an unknown
    name is an error now, not a refusal later."""
    newest: dict[str, Tool[Any, Any]] = {}
    for tool in registry:
        best = newest.get(tool.name)
        if best is None or version_key(tool.version) > version_key(best.version):
            newest[tool.name] = tool
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
    """What the model reads for anything but a success: the stable code first. An unknown
    effect says so (never a success, never a plain failure)."""
    where = f"(warrant run {d.run_id}, step {d.step})"
    if d.state == "executed" and d.outcome == "unknown":
        return (
            f"UNKNOWN_EFFECT: whether this call took effect is not known {where}; do not "
            "assume either; warrant's reconciler finds out"
        )
    if d.state == "awaiting_confirmation":
        return f"WAITING_FOR_APPROVAL: a person must confirm proposal {d.proposal_hash} {where}"
    if d.state == "pending":
        return f"DECISION_PENDING: not decided yet {where}"
    code = d.code or (d.outcome or d.state).upper()
    return f"{code}: {d.message or d.state} {where}"
