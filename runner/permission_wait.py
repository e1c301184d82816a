"""A tool's own permission refusal that asks (pure; the tool stage records it, the policy stage
re-issues the command, the client's grant resumes the run).

The gate's half is :mod:`warrant.runner.grant_wait`. This is the other half: the external
system itself refused the call for a permission (the tool raised
:class:`~warrant.runner.errors.ToolPermissionDenied`, code ``TOOL_PERMISSION_DENIED``). With
the run spec's ``policy.on_missing_grant: "ask"`` the outcome is not an observation for the
planner: the run waits in ``waiting_grant`` with a request of the gate's shape (``source:
"tool"``, the capability and resource the tool named, its message), and its proposal becomes
the pending one again. An operator's grant sends that same proposal through the gate again
(nothing is re-planned); accepted, its command is issued once more.

Why executing again is safe: a refusal (``rejected``) means the tool applied nothing
(``ToolRejected``'s contract), so there is no effect to repeat. Why the new attempt gets a new
idempotency token (:func:`token_after_refusal`): a service that remembers tokens would answer
the refused token with the stored refusal, whatever its access list now says. The fresh token
is derived from the refused one and the refused attempt, so it is stable for that attempt (a
redelivered message gets the same) and differs from every earlier one.

A refusal after the grant waits again (each wait needs an operator's grant, and the run's
deadline bounds them all); without ``ask`` nothing changes: observation and re-plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warrant.runner import run_machine as machine
from warrant.runner.canonical import canonical_json, sha256_hex
from warrant.runner.codes import Outcome
from warrant.runner.errors import ToolPermissionDenied
from warrant.runner.run_machine import Change, Event
from warrant.runner.views import RunView

__all__ = [
    "PERMISSION_DENIED",
    "GrantWait",
    "asks_after_refusal",
    "token_after_refusal",
    "tool_grant_request",
    "wait_for_grant",
]

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


def token_after_refusal(refused_token: str, *, attempt: int) -> str:
    """The idempotency token of the command issued again after attempt ``attempt`` (which
    used ``refused_token``) was refused for a permission: new, and stable for that attempt."""
    return sha256_hex(canonical_json([refused_token, "after-permission-refusal", attempt]))
