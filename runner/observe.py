"""Observe mode: the gate traces what it would refuse and lets the proposal through.

A deployment names the tools it observes (``WARRANT_OBSERVE_TOOLS``: ``name[,name]`` or
``*``; off by default). For those tools, a refusal by an *observable* refusal code is traced
as ``gate.would_refuse`` (code, layer, tool, message) and the proposal goes on to the next
layer. Only the grants are observable (:data:`OBSERVABLE_CODES`: no grant for a capability, a
resource outside the grants' scope, an expired or exhausted grant): they are the policy an
operator rolls out on real traffic. Everything else always refuses (fail-safe): parse,
registry, schema and semantic validation (the arguments must be valid to execute), malformed
resources, task-scoped grants and provenance (they keep injected text from choosing a
destination), the state guard, loop detection, confirmation and budgets. See
``docs/observe-mode.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from warrant.runner.codes import Rejection
from warrant.runner.gate import Event

__all__ = [
    "ALL_TOOLS",
    "OBSERVABLE_CODES",
    "WOULD_REFUSE",
    "is_observed",
    "let_through",
    "would_refusals",
]

#: The trace event of a refusal observe mode let through.
WOULD_REFUSE = "gate.would_refuse"
#: ``WARRANT_OBSERVE_TOOLS=*``: every tool.
ALL_TOOLS = "*"
#: The refusals observe mode may let through (all of the authorization layer's but
#: ``RESOURCE_INVALID`` and ``RESOURCE_NOT_IN_TASK``).
OBSERVABLE_CODES = frozenset(
    {
        Rejection.MISSING_CAPABILITY.value,
        Rejection.RESOURCE_OUT_OF_SCOPE.value,
        Rejection.GRANT_EXPIRED.value,
        Rejection.GRANT_EXHAUSTED.value,
    }
)


def is_observed(tool: str, observed: Iterable[str]) -> bool:
    names = frozenset(observed)
    return ALL_TOOLS in names or tool in names


def let_through(
    observed: frozenset[str],
    events: list[Event],
    *,
    tool: str,
    code: str,
    layer: str,
    message: str | None = None,
) -> bool:
    """Whether the refusal ``code`` is only observed: then ``gate.would_refuse`` is appended
    to ``events`` and the caller goes on as if the layer had passed."""
    if code not in OBSERVABLE_CODES or not is_observed(tool, observed):
        return False
    details: dict[str, Any] = {"code": code, "layer": layer, "tool": tool, "observed": True}
    if message:
        details["message"] = message
    events.append(Event(WOULD_REFUSE, details))
    return True


def would_refusals(trace: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's would-be refusals, from its trace (``run show``): step, proposal, code, layer,
    tool."""
    return [
        {
            "step": e.get("step"),
            "proposal_id": e.get("proposal_id"),
            **{k: (e.get("details") or {}).get(k) for k in ("code", "layer", "tool")},
        }
        for e in trace
        if e.get("event") == WOULD_REFUSE
    ]
