"""Which calls need a person, and what counts as one's confirmation.

Fail-closed by side-effect class: an ``irreversible`` or ``compensatable-write`` tool needs a
per-call confirmation whatever it declares, unless the deployment relaxed it by name
(``WARRANT_RELAX_CONFIRMATION``; traced on every use). A call with an argument only untrusted
content supplied (:mod:`warrant.runner.provenance`) needs one too. A confirmation is a
person's decision bound to the proposal hash (or the tool, for ``per-run``), or, except for
flagged calls, an unused pre-approval of exactly that proposal.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from warrant.runner.canonical import proposal_hash
from warrant.runner.errors import SpecError
from warrant.runner.gate import GateInput
from warrant.runner.spec import PreApproval
from warrant.runner.views import PreApprovalView
from warrant.tools.contract import ConfirmationPolicy, SideEffect, Tool
from warrant.tools.registry import Registry

__all__ = [
    "FAIL_CLOSED",
    "person_decision",
    "pre_approval",
    "pre_approval_record",
    "required_policy",
]

#: Side-effect classes that need a person's confirmation for each call by default.
FAIL_CLOSED = frozenset({SideEffect.IRREVERSIBLE, SideEffect.COMPENSATABLE_WRITE})


def required_policy(
    tool: Tool[Any, Any], *, relaxed: frozenset[str], flagged: bool
) -> tuple[ConfirmationPolicy, str]:
    """The confirmation a call needs and why: ``declared`` (the tool's own policy),
    ``side-effect`` (its class), ``relaxed`` (the deployment lifted that), ``provenance``."""
    if flagged:
        return ConfirmationPolicy.PER_CALL, "provenance"
    if tool.side_effect in FAIL_CLOSED:
        if tool.name in relaxed:
            return tool.confirmation, "relaxed"
        return ConfirmationPolicy.PER_CALL, "side-effect"
    return tool.confirmation, "declared"


def person_decision(
    tool: Tool[Any, Any], policy: ConfirmationPolicy, phash: str, inp: GateInput
) -> tuple[str, str | None]:
    """``('ok', id)``, ``('declined', None)`` or ``('missing', None)``."""
    run, step, now = inp.run, inp.run.step, inp.now
    for c in inp.confirmations:
        if c.run_id != run.run_id or c.used:
            continue
        bound = (
            c.proposal_hash == phash
            if policy is ConfirmationPolicy.PER_CALL
            else c.tool == tool.name
        )
        if not bound or c.expires_at_step < step or c.expires_at <= now:
            continue
        return ("ok", c.confirmation_id) if c.approved else ("declined", None)
    return "missing", None


def pre_approval(phash: str, inp: GateInput) -> PreApprovalView | None:
    """An unused pre-approval of exactly this proposal."""
    return next((p for p in inp.pre_approvals if p.proposal_hash == phash and not p.used), None)


def pre_approval_record(item: PreApproval, registry: Registry, *, field: str) -> dict[str, Any]:
    """The row of a pre-approval: its arguments normalised as the gate normalises a
    proposal's, and the proposal hash they make. An unknown tool or arguments its schema
    refuses raise :class:`SpecError` naming ``field``."""
    tool = registry.get(item.tool, item.tool_version)
    if tool is None:
        message = f"no tool {item.tool}@{item.tool_version}"
        raise SpecError(message, errors=[{"field": f"{field}.tool", "message": message}])
    try:
        arguments = tool.parse_input(item.arguments).model_dump(mode="json")
    except (ValidationError, TypeError, ValueError) as exc:
        message = f"arguments the tool's schema refuses: {exc}"[:500]
        errors = [{"field": f"{field}.arguments", "message": message}]
        raise SpecError(message, errors=errors) from None
    return {
        "proposal_hash": proposal_hash(tool.name, tool.version, arguments),
        "tool": tool.name,
        "tool_version": tool.version,
        "arguments": arguments,
        "approved_by": item.approved_by,
    }
