"""Refusals that ask (pure; the policy and tool stages commit them, the client's grant resumes
the run). With the run spec's ``policy.on_missing_grant: "ask"``, a refusal a grant can cure
does not become an observation and a re-plan: the run waits in ``waiting_grant`` with a
request, and an operator's grant sends the same proposal through the gate again (nothing is
re-planned). Without ``ask`` nothing changes: observation and re-plan.

The gate's half: a proposal refused because the run holds no grant for it
(``MISSING_CAPABILITY``) or none in scope for its resource (``RESOURCE_OUT_OF_SCOPE``).
Nothing ran, so re-checking it is safe.

The tool's half: the external system itself refused the call for a permission (the tool
raised :class:`~warrant.runner.errors.ToolPermissionDenied`, code ``TOOL_PERMISSION_DENIED``).
The request has the gate's shape (``source: "tool"``, the capability and resource the tool
named, its message), and the proposal becomes the pending one again; accepted by the gate,
its command is issued once more.

Why executing again is safe: the command issued again is the same command with the same
idempotency token (a proposal resumed keeps its identity), so a service that applied part of
the call before it answered 403 sees the same key again and does not apply it twice. And a
tool with ``reconcile`` is asked about the token first (:func:`reconcile_first`): an effect
it finds applied is recorded as the outcome and the tool is not called again. (A service
that remembers a refusal under its key answers the same refusal again: the run then waits
again, and a person sees it refused.)

A refusal after the grant waits again (each wait needs an operator's grant, and the run's
deadline bounds them all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warrant.runner import run_machine as machine
from warrant.runner import scopes
from warrant.runner.codes import Outcome, Rejection
from warrant.runner.errors import ToolPermissionDenied
from warrant.runner.run_machine import Change, Event
from warrant.runner.views import GrantView, RunView
from warrant.tools._contract import Tool

__all__ = [
    "ASKING_CODES",
    "PERMISSION_DENIED",
    "GrantWait",
    "asks_after_refusal",
    "asks_for_grant",
    "grant_request",
    "needed_resources",
    "reconcile_first",
    "tool_grant_request",
    "wait_for_grant",
]

# --- the gate's half ------------------------------------------------------------------------

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
        try:
            out.extend(scopes.resource_values(arguments, name))
        except scopes.InvalidResource:
            out.append(str(arguments.get(scopes.top_argument(name)))[:200])
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


# --- the tool's half -------------------------------------------------------------------------

PERMISSION_DENIED = ToolPermissionDenied.code
"""The outcome code of a tool's own permission refusal."""
_BOUND = 200
"""The longest capability, resource or message kept in a request (the tool chose them)."""


@dataclass(frozen=True)
class GrantWait:
    """The run waits for a grant after its tool refused: the request (its ``stop_detail``)
    and the proposal row the gate checks again."""

    request: dict[str, Any]
    proposal_pk: int


def asks_after_refusal(on_missing_grant: str | None, *, status: Outcome, code: str | None) -> bool:
    """Does this tool outcome pause the run for a grant rather than re-plan?"""
    return on_missing_grant == "ask" and status is Outcome.REJECTED and code == PERMISSION_DENIED


def _bounded(value: Any) -> str | None:
    return str(value)[:_BOUND] if value not in (None, "") else None


def tool_grant_request(
    *,
    tool: str,
    tool_version: str,
    details: Mapping[str, Any] | None,
    message: str | None,
    step: int,
    proposal_id: str | None,
    proposal_hash: str | None,
    command_id: str,
    attempt: int,
) -> dict[str, Any]:
    """The gate's request shape (tool, capability, resources, step, proposal) with what the
    tool said: ``details`` is the refusal's (``capability``, ``resource``), ``message`` its
    words (already bounded and masked by the tool stage)."""
    capability = _bounded((details or {}).get("capability"))
    resource = _bounded((details or {}).get("resource"))
    return {
        "code": PERMISSION_DENIED,
        "source": "tool",
        "tool": tool,
        "tool_version": tool_version,
        "capabilities": [capability] if capability else [],
        "capability": capability,
        "resources": [resource] if resource else [],
        "message": message[:_BOUND] if message else None,
        "step": step,
        "proposal_id": proposal_id,
        "proposal_hash": proposal_hash,
        "command_id": command_id,
        "attempt": attempt,
    }


def wait_for_grant(view: RunView, wait: GrantWait, *, events: Sequence[Event] = ()) -> Change:
    """The run's change: ``waiting_grant`` with the request, its proposal pending again (the
    grant's resume sends it to the gate), no active command."""
    change = machine.request_grant(view, request=wait.request, events=events)
    changes = {**change.changes, "pending_proposal_id": wait.proposal_pk, "active_command_id": None}
    return dataclasses.replace(change, changes=changes)


def reconcile_first(tool: Tool[Any, Any], *, attempt: int, previous_code: str | None) -> bool:
    """Is the tool asked about the command's token before attempt ``attempt`` runs? Yes for
    the attempt that follows its own permission refusal (``previous_code``: the earlier
    attempt's outcome code), when the tool can say (``reconcile``): the service may have
    applied part of the call before it refused. Not a batch tool (its items are reconciled
    by their own tokens) nor a long-running one (its job is followed by its hooks)."""
    plain = tool.batch is None and tool.job is None
    return (
        attempt > 1 and plain and tool.reconcile is not None and previous_code == PERMISSION_DENIED
    )
