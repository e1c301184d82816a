"""Which calls need a person, and what counts as one's confirmation.

Fail-closed by side-effect class: an ``irreversible`` or ``compensatable-write`` tool needs a
per-call confirmation whatever it declares, unless the deployment relaxed it by name
(``WARRANT_RELAX_CONFIRMATION``; traced on every use). A call with an argument only untrusted
content supplied (:mod:`warrant.runner.provenance`) needs one too. A confirmation is a
person's decision bound to the proposal hash (or the tool, for ``per-run``), or, except for
flagged calls, an unused pre-approval of exactly that proposal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from warrant.runner.authz import name_of
from warrant.runner.canonical import proposal_hash
from warrant.runner.codes import RunStatus, StopReason
from warrant.runner.errors import ConfirmationRefused, Forbidden, InvalidRequest, SpecError
from warrant.runner.gate import GateInput
from warrant.runner.run_machine import Stop
from warrant.runner.spec import Budgets, PreApproval
from warrant.runner.views import ConfirmationView, PreApprovalView
from warrant.tools._contract import ConfirmationPolicy, SideEffect, Tool
from warrant.tools._registry import Registry

__all__ = [
    "FAIL_CLOSED",
    "Correction",
    "add_approval",
    "approvals_pending",
    "approvals_required",
    "asked_call",
    "confirmation_wait_over",
    "corrected_call",
    "person_decision",
    "pre_approval",
    "pre_approval_record",
    "principal_of",
    "request_clock",
    "required_policy",
    "resumed_deadline",
    "self_approval",
    "undecided",
    "waiting_for",
]

#: Side-effect classes that need a person's confirmation for each call by default.
FAIL_CLOSED = frozenset({SideEffect.IRREVERSIBLE, SideEffect.COMPENSATABLE_WRITE})


def required_policy(
    tool: Tool[Any, Any], *, relaxed: frozenset[str], flagged: bool, confirm_writes: bool = False
) -> tuple[ConfirmationPolicy, str]:
    """The confirmation a call needs and why: ``declared`` (the tool's own policy),
    ``side-effect`` (its class), ``relaxed`` (the deployment lifted that), ``provenance``,
    ``run-policy`` (the run's ``policy.confirm_writes``: a router's high-risk branch)."""
    if flagged:
        return ConfirmationPolicy.PER_CALL, "provenance"
    if confirm_writes and tool.side_effect is not SideEffect.READ:
        return ConfirmationPolicy.PER_CALL, "run-policy"
    if tool.side_effect in FAIL_CLOSED:
        if tool.name in relaxed:
            return tool.confirmation, "relaxed"
        return ConfirmationPolicy.PER_CALL, "side-effect"
    return tool.confirmation, "declared"


def person_decision(
    tool: Tool[Any, Any], policy: ConfirmationPolicy, phash: str, inp: GateInput
) -> tuple[str, str | None]:
    """``('ok', id)``, ``('declined', None)`` or ``('missing', None)``.

    A per-call confirmation is bound to the proposal hash and used once. A ``per-run`` one is
    bound to the tool: unused and unexpired, it lets the first call through; once that call
    used it, an approval asked as ``per-run`` (``covers_run``) covers the tool's later calls
    in the run (its expiry bounds the wait for the first use, not the run)."""
    run, step, now = inp.run, inp.run.step, inp.now
    per_call = policy is ConfirmationPolicy.PER_CALL
    for c in inp.confirmations:
        if c.run_id != run.run_id or (c.used and (per_call or not _covers(c))):
            continue
        bound = c.proposal_hash == phash if per_call else c.tool == tool.name
        live = c.used or (c.expires_at_step >= step and c.expires_at > now)
        if not bound or not live:
            continue
        return ("ok", c.confirmation_id) if c.approved else ("declined", None)
    return "missing", None


def _covers(c: ConfirmationView) -> bool:
    """A person approved a ``per-run`` request: once used, the approval covers the run."""
    return c.approved and c.covers_run


def approvals_required(tool: Tool[Any, Any], arguments: dict[str, Any]) -> int:
    """How many distinct principals must approve this call: the tool's ``approvals_required``
    or, if larger, what its ``approvals_rule`` says of the validated arguments. A rule that
    raises or answers no integer fails closed: one more than declared."""
    declared = max(1, int(tool.approvals_required))
    if tool.approvals_rule is None:
        return declared
    try:
        ruled = tool.approvals_rule(arguments)
    except Exception:
        return declared + 1
    if not isinstance(ruled, int) or isinstance(ruled, bool):
        return declared + 1
    return max(declared, ruled)


def principal_of(label: str | None) -> str | None:
    """Who a recorded identity is: an API token's name (``alice (producer)`` and ``alice
    (approver)`` are both ``alice``); a local name (``--by``, unauthenticated) as given."""
    if label is None or not label.strip():
        return None
    return name_of(label.strip())


def self_approval(
    started_by: str | None,
    by: str,
    *,
    tool_allows: bool,
    deployment_allows: bool,
) -> str | None:
    """``None`` when ``by`` did not start the run; else why it may decide anyway (``tool``
    or ``deployment``); else :class:`Forbidden` ``OWN_RUN_APPROVAL_FORBIDDEN``."""
    starter = principal_of(started_by)
    if starter is None or starter != principal_of(by):
        return None
    if tool_allows:
        return "tool"
    if deployment_allows:
        return "deployment"
    raise Forbidden(
        f"{by} started this run and may not decide on its proposals: another person must",
        code="OWN_RUN_APPROVAL_FORBIDDEN",
    )


def add_approval(approved_by: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The approvals so far with ``entry`` (``{"by": label, …}``) added; the same principal
    counts once: a second approval by it raises :class:`ConfirmationRefused`
    ``ALREADY_APPROVED``."""
    who = principal_of(str(entry["by"]))
    if any(principal_of(str(a.get("by"))) == who for a in approved_by):
        raise ConfirmationRefused(
            f"{who} has already approved this proposal; another person must",
            code="ALREADY_APPROVED",
        )
    return [*approved_by, entry]


def approvals_pending(request: dict[str, Any] | None, phash: str) -> dict[str, Any] | None:
    """``{"approvals_required": M, "approved_by": [label, …]}`` while the request for the
    proposal ``phash`` (or, in a parallel step's set, its call's) still waits for more
    approvals; ``None`` once it does not."""
    asked = asked_call(request or {}, phash)
    if asked is None or asked.get("decision"):
        return None
    names = [str(a.get("by")) for a in asked.get("approved_by") or []]
    required = int(asked.get("approvals_required") or 1)
    if len(names) >= required:
        return None
    return {"approvals_required": required, "approved_by": names}


# -- A parallel step's calls that need a person wait together: the step's confirmation request
# lists the set (``parallel.calls``), each call that needs a person with its own request (hash,
# approvals required, who approved, whether the run's starter may). A decision is taken on one
# call by its hash, or on several at once; the run goes back to the gate once every one of them
# is decided (``decision``: ``approved`` or ``declined``).


def asked_call(request: dict[str, Any], phash: str) -> dict[str, Any] | None:
    """The request a decision on ``phash`` answers: the pending request itself, or, for a
    parallel step, the set's call of that hash that needs a person (``None``: neither)."""
    calls = (request.get("parallel") or {}).get("calls")
    if calls is None:
        return request if request.get("proposal_hash") == phash else None
    return next(
        (c for c in calls if c.get("status") == "needs_person" and c.get("proposal_hash") == phash),
        None,
    )


def waiting_for(request: dict[str, Any] | None) -> list[str]:
    """What a run waiting for people still waits for after a decision: the hashes of the
    calls still undecided (a set's), or the pending proposal's while it needs more approvals."""
    if not request:
        return []
    if (request.get("parallel") or {}).get("calls") is not None:
        return undecided(request)
    phash = str(request.get("proposal_hash"))
    return [phash] if approvals_pending(request, phash) is not None else []


def undecided(request: dict[str, Any]) -> list[str]:
    """The hashes of a parallel step's calls that still wait for a person's decision (for a
    single proposal's request: none, its decision is the request's)."""
    calls = (request.get("parallel") or {}).get("calls") or []
    return [
        str(c.get("proposal_hash"))
        for c in calls
        if c.get("status") == "needs_person" and not c.get("decision")
    ]


def pre_approval(phash: str, inp: GateInput) -> PreApprovalView | None:
    """An unused pre-approval of exactly this proposal."""
    return next((p for p in inp.pre_approvals if p.proposal_hash == phash and not p.used), None)


def pre_approval_record(
    item: PreApproval,
    registry: Registry,
    *,
    field: str,
    floor: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The row of a pre-approval: its arguments normalised as the gate normalises a
    proposal's, and the proposal hash they make. An unknown tool or arguments its schema
    refuses raise :class:`SpecError` naming ``field``; so does a call that needs more than one
    approver (the tool's ``approvals_required`` or rule, or the deployment's ``floor``): a
    pre-approval is one person's word and cannot stand for M of N."""
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
    needed = max(approvals_required(tool, arguments), (floor or {}).get(tool.name, 1))
    if needed > 1:
        message = (
            f"{tool.name} needs {needed} distinct approvers for these arguments: one person's "
            "pre-approval cannot stand for them (approve it when the run asks)"
        )
        raise SpecError(message, errors=[{"field": f"{field}.approved_by", "message": message}])
    return {
        "proposal_hash": proposal_hash(tool.name, tool.version, arguments),
        "tool": tool.name,
        "tool_version": tool.version,
        "arguments": arguments,
        "approved_by": item.approved_by,
    }


# --- a person corrects a pending proposal instead of approving it as it is: the original
# arguments with the person's changes make a new proposal with its own hash, gated again from
# the start; the original is declined. The edit is that person's approval of the new hash only
# when one person's word may approve it (one approver needed, no state to be shown first).


@dataclass(frozen=True)
class Correction:
    """The call a person's edit makes."""

    arguments: dict[str, Any]
    """The original arguments with the changes, normalised as the gate normalises them."""
    proposal_hash: str
    changed: list[str]
    """The arguments whose values differ from the original's."""
    approves: bool
    """The edit counts as its author's approval of the new hash: the call needs one approver
    (the tool's rule and the deployment's ``floor``) and declares no ``precondition`` (a
    state the person has not seen for these arguments). Otherwise the new call waits for its
    own confirmation, M of N and requester-is-not-approver as ever."""


def corrected_call(
    tool: Tool[Any, Any], original: Mapping[str, Any], changes: Mapping[str, Any], *, floor: int = 1
) -> Correction:
    """The call ``changes`` (argument → new value) make of the pending call ``original`` of
    ``tool``. :class:`InvalidRequest` ``CORRECTION_EMPTY`` when nothing changes,
    ``CORRECTION_INVALID`` for an argument the schema does not have, a secret one (no one
    is shown it) or values the schema refuses."""
    if not changes:
        raise InvalidRequest(
            "nothing to correct: name an argument and its value", code="CORRECTION_EMPTY"
        )
    unknown = sorted(set(changes) - set(tool.input_model.model_fields))
    secret = sorted(set(changes) & tool.secret_fields)
    if unknown or secret:
        what = f"no argument {', '.join(unknown)}" if unknown else f"{', '.join(secret)} is secret"
        raise InvalidRequest(f"{tool.name}: {what}; nothing corrected", code="CORRECTION_INVALID")
    try:
        arguments = tool.parse_input({**original, **changes}).model_dump(mode="json")
    except (ValidationError, TypeError, ValueError) as exc:
        message = f"the corrected arguments are refused by {tool.name}'s schema: {exc}"[:500]
        raise InvalidRequest(message, code="CORRECTION_INVALID") from None
    changed = sorted(k for k in {*arguments, *original} if arguments.get(k) != original.get(k))
    if not changed:
        raise InvalidRequest(
            "the corrected arguments are the proposal's own: approve it instead",
            code="CORRECTION_EMPTY",
        )
    needed = max(approvals_required(tool, arguments), floor)
    return Correction(
        arguments=arguments,
        proposal_hash=proposal_hash(tool.name, tool.version, arguments),
        changed=changed,
        approves=needed == 1 and tool.precondition is None,
    )


# --- the run's deadline while a person is asked (``Budgets.deadline_pauses_for_confirmation``)


def request_clock(budgets: Budgets, *, deadline_at: float, now: float) -> dict[str, Any]:
    """The times of a confirmation request asked at ``now``: ``asked_at``; ``expires_at``,
    ``confirmation_ttl_s`` later, never past the run's deadline unless the deadline pauses
    while a person is asked (then ``deadline_paused``: the reconciler does not stop the run at
    its deadline while it waits, and :func:`resumed_deadline` moves the deadline on)."""
    paused = budgets.deadline_pauses_for_confirmation
    expires_at = now + budgets.confirmation_ttl_s
    if not paused:
        expires_at = min(expires_at, deadline_at)
    return {"asked_at": now, "expires_at": expires_at, "deadline_paused": paused}


def resumed_deadline(request: Mapping[str, Any], *, deadline_at: float, now: float) -> float | None:
    """The run's deadline once a person decided at ``now`` on ``request`` (see
    :func:`request_clock`): later by the time the run waited, when its deadline pauses while
    a person is asked; ``None`` = unchanged."""
    asked_at = request.get("asked_at")
    if not request.get("deadline_paused") or asked_at is None:
        return None
    return deadline_at + max(0.0, now - float(asked_at))


def confirmation_wait_over(
    request: Mapping[str, Any], *, deadline_at: float, now: float
) -> Stop | None:
    """Why a run that waits for a person's confirmation of ``request`` stops at ``now``: its
    deadline (``failed``, ``DEADLINE_REACHED``, as wherever a deadline ends a run; never
    while a deadline that pauses waits), or the request's expiry (``cancelled``,
    ``CONFIRMATION_EXPIRED``). ``None``: it waits on. Nothing ran: ``effect`` ``none``."""
    if not request.get("deadline_paused") and deadline_at <= now:
        return Stop(RunStatus.FAILED, StopReason.DEADLINE_REACHED, {"effect": "none"})
    if float(request.get("expires_at", 0)) <= now:
        return Stop(RunStatus.CANCELLED, StopReason.CONFIRMATION_EXPIRED, {"effect": "none"})
    return None
