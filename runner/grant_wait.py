"""Refusals that ask: whether a gate refusal pauses the run for an operator's grant, and what
the run then waits for (pure; the policy stage commits it, the client's grant resumes it).

With the run spec's ``policy.on_missing_grant: "ask"``, a proposal refused because the run
holds no grant for it (``MISSING_CAPABILITY``) or none in scope for its resource
(``RESOURCE_OUT_OF_SCOPE``) does not become an observation and a re-plan: the run waits in
``waiting_grant`` with the request below, and a grant sends the same proposal through the
gate again. Nothing ran, so re-checking it is safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from warrant.runner import scopes
from warrant.runner.codes import Rejection
from warrant.runner.views import GrantView
from warrant.tools._contract import Tool

__all__ = ["ASKING_CODES", "asks_for_grant", "grant_request", "needed_resources"]

ASKING_CODES = frozenset(
    {Rejection.MISSING_CAPABILITY.value, Rejection.RESOURCE_OUT_OF_SCOPE.value}
)
"""Refusals a grant can cure (an expired or exhausted grant, an invalid resource are not)."""


def asks_for_grant(on_missing_grant: str | None, code: str) -> bool:
    """Does this refusal pause the run for a grant rather than re-plan?"""
    return on_missing_grant == "ask" and code in ASKING_CODES


def needed_resources(tool: Tool[Any, Any], arguments: dict[str, Any], subject: str) -> list[str]:
    """The resource values the call needs a grant for (each element of a list argument)."""
    if not tool.resources:
        try:
            return [tool.resource(tool.parse_input(arguments), subject)]
        except Exception:
            return []
    out: list[str] = []
    for name in sorted(tool.resources):
        argument = arguments.get(name)
        if argument is None:
            continue
        try:
            out.extend(scopes.values_of(argument))
        except scopes.InvalidResource:
            out.append(str(argument)[:200])
    return out


def grant_request(
    *,
    code: str,
    tool: Tool[Any, Any],
    arguments: dict[str, Any],
    subject: str,
    grants: Sequence[GrantView],
    step: int,
    proposal_id: str | None,
    proposal_hash: str | None,
) -> dict[str, Any]:
    """What the run waits for: the tool, the capabilities it lacks (every one of the tool's
    when the refusal was a resource out of scope), the resources, the step and the proposal."""
    held = {g.capability for g in grants}
    missing = [c for c in tool.capabilities if c not in held]
    if code != Rejection.MISSING_CAPABILITY.value or not missing:
        missing = list(tool.capabilities)
    return {
        "code": code,
        "source": "gate",
        "tool": tool.name,
        "tool_version": tool.version,
        "capabilities": missing,
        "capability": missing[0] if missing else None,
        "resources": needed_resources(tool, arguments, subject),
        "step": step,
        "proposal_id": proposal_id,
        "proposal_hash": proposal_hash,
    }
