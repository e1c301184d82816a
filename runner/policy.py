"""The policy gate: pure layers, in order, first failure wins.

    parse -> registry -> input schema -> semantic validation -> authorization (grants)
    -> state guard -> loop detection -> confirmation -> budget -> ExecutableCommand

Each layer appends a trace event (controlled summaries only: names, codes, sizes, hashes).
:func:`evaluate` is a pure function of (proposal, run state, grants, confirmations, history,
registry, now), so every layer is unit-tested without Celery or a database.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from warrant.runner.canonical import canonical_json, proposal_hash, sha256_hex
from warrant.runner.codes import Phase, Rejection, RunStatus, StopReason, invalid_field_code
from warrant.runner.spec import ToolProposal
from warrant.runner.state import ConfirmationView, GrantView, HistoryEntry, RunView
from warrant.tools.contract import ConfirmationPolicy, Tool
from warrant.tools.registry import Registry

__all__ = [
    "LAYER_OF_EVENT",
    "Accept",
    "AwaitConfirmation",
    "Event",
    "GateInput",
    "Ignore",
    "Reject",
    "Stop",
    "evaluate",
]


@dataclass(frozen=True)
class Event:
    name: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class GateInput:
    raw: Any
    run: RunView
    expected_version: int
    grants: Sequence[GrantView]
    confirmations: Sequence[ConfirmationView]
    history: Sequence[HistoryEntry]
    registry: Registry
    now: float
    deployment: Callable[[str, str], str | None] | None = None
    """Which worker role lacks a tool the registry has (``None``: every role serving it has it;
    from the workers' registrations in the ledger)."""


@dataclass(frozen=True, kw_only=True)
class Accept:
    proposal: ToolProposal
    tool: Tool[Any, Any]
    arguments: dict[str, Any]
    arguments_hash: str
    proposal_hash: str
    resource: str
    grant_ids: tuple[int, ...]
    confirmation_id: str | None
    events: list[Event]


@dataclass(frozen=True, kw_only=True)
class Reject:
    code: str
    layer: str
    fingerprint: str | None
    events: list[Event]
    message: str | None = None
    """Why, for people (the code is the contract)."""


@dataclass(frozen=True, kw_only=True)
class Stop:
    reason: StopReason
    status: RunStatus
    fingerprint: str | None
    events: list[Event]
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AwaitConfirmation:
    proposal: ToolProposal
    tool: Tool[Any, Any]
    arguments: dict[str, Any]
    proposal_hash: str
    resource: str
    events: list[Event]

    def request(self) -> dict[str, Any]:
        """What a person is shown: action, target, key parameters, side effect, undo."""
        shown = {
            k: ("<sensitive>" if k in self.tool.sensitive_fields else v)
            for k, v in self.arguments.items()
        }
        return {
            "tool": self.tool.name,
            "tool_version": self.tool.version,
            "action": self.tool.description,
            "resource": self.resource,
            "parameters": shown,
            "side_effect": self.tool.side_effect.value,
            "reversible": self.tool.side_effect.value in ("read", "compensatable-write"),
            "proposal_hash": self.proposal_hash,
        }


@dataclass(frozen=True)
class Ignore:
    """The message is stale for this run state; drop it (the state guard)."""

    reason: str


Decision = Accept | Reject | Stop | AwaitConfirmation | Ignore


def _raw_fingerprint(raw: Any) -> str | None:
    if not isinstance(raw, dict):
        return None
    try:
        body = canonical_json(
            {
                "tool": raw.get("tool"),
                "tool_version": raw.get("tool_version"),
                "arguments": raw.get("arguments"),
            }
        )
    except Exception:
        body = json.dumps(
            [raw.get("tool"), raw.get("tool_version"), raw.get("arguments")],
            sort_keys=True,
            default=str,
        ).encode()
    return sha256_hex(body)


def _schema_code(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    if any(e["type"] == "extra_forbidden" for e in errors):
        return Rejection.UNKNOWN_INPUT_FIELD.value
    loc = errors[0]["loc"] if errors else ()
    return invalid_field_code(str(loc[0]) if loc else "input")


def _repeats(fp: str, inp: GateInput) -> int:
    """1 + earlier proposals with this fingerprint and no new observation since."""
    version = inp.run.observation_version
    return 1 + sum(
        1 for h in inp.history if h.fingerprint == fp and h.observation_version == version
    )


def _oscillates(fp: str, inp: GateInput) -> bool:
    """A-B-A-B inside the window, with no new observation in between."""
    window = [h for h in inp.history[-3:]]
    if len(window) < 3:
        return False
    seq = [h.fingerprint for h in window] + [fp]
    same_version = all(h.observation_version == inp.run.observation_version for h in window)
    return same_version and seq[0] == seq[2] and seq[1] == seq[3] and seq[0] != seq[1]


def _reject(
    code: str,
    layer: str,
    fp: str | None,
    inp: GateInput,
    events: list[Event],
    *,
    message: str | None = None,
) -> Decision:
    details = {"code": code, "layer": layer}
    if message:
        details["message"] = message
    events.append(Event("proposal.rejected", details))
    if fp is not None and _repeats(fp, inp) > inp.run.budgets.max_repeated_proposal:
        reason = StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION
        events.append(Event("proposal.loop_detected", {"count": _repeats(fp, inp)}))
        return Stop(
            reason=reason,
            status=RunStatus.FAILED,
            fingerprint=fp,
            events=events,
            detail={"last_code": code},
        )
    return Reject(code=code, layer=layer, fingerprint=fp, events=events, message=message)


def _authorize(
    tool: Tool[Any, Any], resource: str, inp: GateInput
) -> tuple[str | None, tuple[int, ...]]:
    used: list[int] = []
    for capability in tool.capabilities:
        held = [g for g in inp.grants if g.capability == capability and g.run_id == inp.run.run_id]
        if not held:
            return Rejection.MISSING_CAPABILITY.value, ()
        in_scope = [g for g in held if g.covers(resource)]
        if not in_scope:
            return Rejection.RESOURCE_OUT_OF_SCOPE.value, ()
        live = [
            g for g in in_scope if g.expires_at_step is None or g.expires_at_step >= inp.run.step
        ]
        if not live:
            return Rejection.GRANT_EXPIRED.value, ()
        usable = [g for g in live if g.max_uses is None or g.uses < g.max_uses]
        if not usable:
            return Rejection.GRANT_EXHAUSTED.value, ()
        used.append(usable[0].grant_id)
    return None, tuple(used)


def _confirmation(tool: Tool[Any, Any], phash: str, inp: GateInput) -> tuple[str, str | None]:
    """('ok', id) | ('declined', None) | ('missing', None)."""
    if tool.confirmation is ConfirmationPolicy.NEVER:
        return "ok", None
    run, step, now = inp.run, inp.run.step, inp.now
    for c in inp.confirmations:
        if c.run_id != run.run_id or c.used:
            continue
        bound = (
            c.proposal_hash == phash
            if tool.confirmation is ConfirmationPolicy.PER_CALL
            else c.tool == tool.name
        )
        if not bound or c.expires_at_step < step or c.expires_at <= now:
            continue
        return ("ok", c.confirmation_id) if c.approved else ("declined", None)
    return "missing", None


class _Events(list[Event]):
    """The decision's events; each append is also reported to an observer (spans)."""

    def __init__(self, observer: Callable[[Event], None] | None) -> None:
        super().__init__()
        self._observer = observer

    def append(self, event: Event) -> None:
        super().append(event)
        if self._observer is not None:
            self._observer(event)


#: Which gate layer an event closes (for per-layer spans).
LAYER_OF_EVENT = {
    "proposal.parsed": "parse",
    "proposal.registry.checked": "registry",
    "proposal.schema.validated": "schema",
    "proposal.semantic.validated": "semantic",
    "policy.capability.checked": "authorization",
    "policy.state.checked": "state_guard",
    "policy.loop.checked": "loop_detection",
    "proposal.loop_detected": "loop_detection",
    "proposal.oscillation_detected": "loop_detection",
    "policy.confirmation.checked": "confirmation",
    "policy.budget.checked": "budget",
}


def evaluate(inp: GateInput, *, on_event: Callable[[Event], None] | None = None) -> Decision:
    """Run the layers. ``on_event`` observes each layer's event as it happens (the shell
    turns them into spans); it cannot change the decision."""
    events: list[Event] = _Events(on_event)
    run = inp.run

    def refuse_raw(code: str, layer: str, message: str | None = None) -> Decision:
        # before the arguments are validated, loops are detected on the raw proposal
        return _reject(code, layer, _raw_fingerprint(inp.raw), inp, events, message=message)

    # parse
    try:
        proposal = ToolProposal.model_validate(inp.raw)
    except ValidationError:
        return refuse_raw(Rejection.PROPOSAL_PARSE_FAILED.value, "parse")
    events.append(
        Event("proposal.parsed", {"tool": proposal.tool, "version": proposal.tool_version})
    )

    # registry
    tool = inp.registry.get(proposal.tool, proposal.tool_version)
    if tool is None:
        return refuse_raw(
            Rejection.UNKNOWN_TOOL_OR_VERSION.value,
            "registry",
            f"the policy worker's registry has no {proposal.tool}@{proposal.tool_version} "
            f"(registry {inp.registry.fingerprint[:12]})",
        )
    lacking = inp.deployment(tool.name, tool.version) if inp.deployment else None
    if lacking:
        return refuse_raw(Rejection.TOOL_NOT_DEPLOYED.value, "registry", lacking)
    events.append(Event("proposal.registry.checked", {"tool": tool.name, "version": tool.version}))

    # input schema
    if not isinstance(proposal.arguments, dict):
        return refuse_raw(Rejection.INPUT_NOT_OBJECT.value, "schema")
    size = len(json.dumps(proposal.arguments, default=str))
    if size > tool.max_input_bytes:
        return refuse_raw(Rejection.INPUT_TOO_LARGE.value, "schema")
    try:
        model = tool.parse_input(proposal.arguments)
        arguments = model.model_dump(mode="json")
        canonical_arguments = canonical_json(arguments)
        args_hash = sha256_hex(canonical_arguments)
    except ValidationError as exc:
        return refuse_raw(_schema_code(exc), "schema")
    except Exception:  # e.g. a number canonical JSON cannot represent
        return refuse_raw(invalid_field_code("input"), "schema")
    phash = proposal_hash(
        tool.name, tool.version, arguments, canonical_arguments=canonical_arguments
    )
    fp = phash
    events.append(Event("proposal.schema.validated", {"arguments_hash": args_hash, "bytes": size}))

    # semantic validation
    if tool.validate is not None:
        code = tool.validate(model, run.subject)
        if code:
            return _reject(code, "semantic", fp, inp, events)
    events.append(Event("proposal.semantic.validated", {"tool": tool.name}))

    # authorization
    resource = tool.resource(model, run.subject)
    code, grant_ids = _authorize(tool, resource, inp)
    events.append(
        Event(
            "policy.capability.checked",
            {"required": list(tool.capabilities), "allowed": code is None, "code": code},
        )
    )
    if code:
        return _reject(code, "authorization", fp, inp, events)

    # state guard
    if (
        run.status is not RunStatus.RUNNING
        or run.phase is not Phase.POLICY
        or run.version != inp.expected_version
    ):
        return Ignore(f"state {run.status}/{run.phase} v{run.version}")
    events.append(Event("policy.state.checked", {"version": run.version}))

    # loop detection
    repeats = _repeats(fp, inp)
    if repeats > run.budgets.max_repeated_proposal:
        events.append(Event("proposal.loop_detected", {"count": repeats}))
        return Stop(
            reason=StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION,
            status=RunStatus.FAILED,
            fingerprint=fp,
            events=events,
        )
    if _oscillates(fp, inp):
        events.append(Event("proposal.oscillation_detected", {"window": 4}))
        return Stop(
            reason=StopReason.PROPOSAL_OSCILLATION_DETECTED,
            status=RunStatus.FAILED,
            fingerprint=fp,
            events=events,
        )
    events.append(Event("policy.loop.checked", {"repeats": repeats}))

    # confirmation
    state, confirmation_id = _confirmation(tool, phash, inp)
    events.append(
        Event(
            "policy.confirmation.checked",
            {"policy": tool.confirmation.value, "result": state, "proposal_hash": phash},
        )
    )
    if state == "declined":
        return _reject(Rejection.CONFIRMATION_DECLINED.value, "confirmation", fp, inp, events)
    if state == "missing":
        return AwaitConfirmation(
            proposal=proposal,
            tool=tool,
            arguments=arguments,
            proposal_hash=phash,
            resource=resource,
            events=events,
        )

    # budget
    if inp.now >= run.deadline_at:
        return Stop(
            reason=StopReason.DEADLINE_REACHED,
            status=RunStatus.FAILED,
            fingerprint=fp,
            events=events,
        )
    per_tool = run.budgets.max_tool_calls_per_tool.get(tool.name)
    if run.tool_calls >= run.budgets.max_tool_calls or (
        per_tool is not None and run.tool_calls_by_tool.get(tool.name, 0) >= per_tool
    ):
        return Stop(
            reason=StopReason.MAX_TOOL_CALLS_REACHED,
            status=RunStatus.FAILED,
            fingerprint=fp,
            events=events,
            detail={"tool": tool.name},
        )
    events.append(
        Event(
            "policy.budget.checked",
            {"tool_calls": run.tool_calls, "max_tool_calls": run.budgets.max_tool_calls},
        )
    )

    return Accept(
        proposal=proposal,
        tool=tool,
        arguments=arguments,
        arguments_hash=args_hash,
        proposal_hash=phash,
        resource=resource,
        grant_ids=grant_ids,
        confirmation_id=confirmation_id,
        events=events,
    )
