"""What both adapters do with a decision, and which tools they offer."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from warrant.runner.client.contract import RunnerClient
from warrant.runner.client.external_calls import ExternalCalls, granted_tools, newest_tools
from warrant.runner.errors import ServiceUnavailable, WarrantError
from warrant.runner.external import Decision, explain
from warrant.tools._contract import Tool
from warrant.tools._plugins import registry_for
from warrant.tools._registry import Registry

__all__ = [
    "Approver",
    "error_text",
    "failure_text",
    "gate_calls",
    "offered",
    "output_text",
    "succeeded",
]

#: Called (in a thread) with each call that starts waiting for a person: it asks an approver
#: (a chat message, a page, a ticket) whose decision reaches warrant under the approver's own
#: credential (inbox, API, CLI). Its return value is ignored: the agent never decides.
Approver = Callable[[Decision], Any]


def gate_calls(
    client: RunnerClient, registry: Registry | None, *, decision_wait_s: float
) -> tuple[ExternalCalls, Registry]:
    """The adapters' calls through the gate, on ``registry`` (default: this deployment's)."""
    if registry is None:
        registry = registry_for()
    return ExternalCalls(client, registry, decision_wait_s=decision_wait_s), registry


def offered(
    registry: Registry, names: list[str] | None, *, client: RunnerClient, run_id: str
) -> list[Tool[Any, Any]]:
    """The newest version of each tool named (default: every tool the run's grants cover);
    a name the registry lacks, or a tool the run's grants do not cover, is an error now, not
    a refusal later."""
    capabilities = client.get_run(run_id).capabilities
    newest = newest_tools(registry)
    if names is None:
        return granted_tools([newest[n] for n in sorted(newest)], capabilities)
    missing = [n for n in names if n not in newest]
    if missing:
        raise ValueError(f"no such tool in the registry: {', '.join(missing)}")
    chosen = [newest[n] for n in names]
    covered = {t.name for t in granted_tools(chosen, capabilities)}
    if ungranted := [n for n in names if n not in covered]:
        raise ValueError(f"run {run_id} grants no capability for: {', '.join(ungranted)}")
    return chosen


def succeeded(d: Decision) -> bool:
    return d.state == "executed" and d.outcome == "succeeded"


def output_text(d: Decision) -> str:
    return json.dumps(d.output, sort_keys=True)


def failure_text(d: Decision) -> str:
    """What the model reads for anything but a success: the stable code first (an unknown
    effect says ``UNKNOWN_EFFECT``: never a success, never a plain failure)."""
    code, message = explain(d)
    return f"{code}: {message}"


def error_text(exc: WarrantError) -> str:
    """What the model reads when the call got no decision: the code first; warrant out of
    reach is said to be retryable (the same call again is sent under the same key: it runs
    at most once), not a refusal."""
    if isinstance(exc, ServiceUnavailable):
        return (
            f"{exc.code} (retryable): warrant could not be reached: {exc}. Call the tool again "
            "with the same arguments: warrant runs it at most once."
        )
    return f"{exc.code}: {exc}"
