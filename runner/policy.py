"""The policy gate: pure layers, in order, first failure wins.

    parse -> registry -> input schema -> semantic validation -> authorization (grants)
    -> state guard -> loop detection -> confirmation -> budget -> ExecutableCommand

Each layer is one function and appends a trace event (controlled summaries only: names,
codes, sizes, hashes). :func:`evaluate` is a pure function of (proposal, run state, grants,
confirmations, history, registry, now), so every layer is unit-tested without Celery or a
database. Its input, events and decisions are defined in :mod:`warrant.runner.gate` (and
re-exported here).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from warrant.runner.canonical import canonical_json, proposal_hash, sha256_hex
from warrant.runner.codes import Phase, Rejection, RunStatus, StopReason, invalid_field_code
from warrant.runner.gate import (
    LAYER_OF_EVENT,
    Accept,
    AwaitConfirmation,
    Decision,
    Event,
    EventLog,
    GateInput,
    Halt,
    Ignore,
    Reject,
)
from warrant.runner.spec import ToolProposal
from warrant.tools.contract import ConfirmationPolicy, Tool

__all__ = [
    "LAYER_OF_EVENT",
    "Accept",
    "AwaitConfirmation",
    "Decision",
    "Event",
    "GateInput",
    "Halt",
    "Ignore",
    "Reject",
    "evaluate",
]


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
        events.append(Event("proposal.loop_detected", {"count": _repeats(fp, inp)}))
        return _fail(
            StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION, fp, events, last_code=code
        )
    return Reject(code=code, layer=layer, fingerprint=fp, events=events, message=message)


def _fail(reason: StopReason, fp: str | None, events: list[Event], **detail: Any) -> Halt:
    """The run fails (a loop, the deadline, a tool-call budget); ``detail`` is recorded."""
    return Halt(
        reason=reason, status=RunStatus.FAILED, fingerprint=fp, events=events, detail=detail
    )


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


def evaluate(inp: GateInput, *, on_event: Callable[[Event], None] | None = None) -> Decision:
    """Run the layers. ``on_event`` observes each layer's event as it happens (the shell
    turns them into spans); it cannot change the decision."""
    events: list[Event] = EventLog(on_event)
    proposal = _parse(inp, events)
    if not isinstance(proposal, ToolProposal):
        return proposal
    tool = _look_up(proposal, inp, events)
    if not isinstance(tool, Tool):
        return tool
    checked = _validate_input(proposal, tool, inp, events)
    if not isinstance(checked, _Checked):
        return checked
    refused = _validate_semantics(checked, inp, events)
    if refused is not None:
        return refused
    granted = _check_grants(checked, inp, events)
    if not isinstance(granted, _Granted):
        return granted
    ignored = _guard_state(inp, events)
    if ignored is not None:
        return ignored
    looping = _detect_loops(checked, inp, events)
    if looping is not None:
        return looping
    confirmed = _check_confirmation(checked, granted, inp, events)
    if not isinstance(confirmed, _Confirmed):
        return confirmed
    over = _check_budgets(checked, inp, events)
    if over is not None:
        return over
    return Accept(
        proposal=proposal,
        tool=tool,
        arguments=checked.arguments,
        arguments_hash=checked.arguments_hash,
        proposal_hash=checked.proposal_hash,
        resource=granted.resource,
        grant_ids=granted.grant_ids,
        confirmation_id=confirmed.confirmation_id,
        events=events,
    )


# --- the layers, in order: each returns what the next needs, or the decision ------------------


@dataclass(frozen=True)
class _Checked:
    """A proposal past the parse, registry and input-schema layers."""

    proposal: ToolProposal
    tool: Tool[Any, Any]
    model: Any
    """The validated input model."""
    arguments: dict[str, Any]
    arguments_hash: str
    proposal_hash: str
    """Also the proposal's fingerprint for loop detection."""


@dataclass(frozen=True)
class _Granted:
    resource: str
    grant_ids: tuple[int, ...]


@dataclass(frozen=True)
class _Confirmed:
    confirmation_id: str | None


def _refuse_raw(
    code: str, layer: str, inp: GateInput, events: list[Event], message: str | None = None
) -> Decision:
    """Before the arguments are validated, loops are detected on the raw proposal."""
    return _reject(code, layer, _raw_fingerprint(inp.raw), inp, events, message=message)


def _parse(inp: GateInput, events: list[Event]) -> ToolProposal | Decision:
    try:
        proposal = ToolProposal.model_validate(inp.raw)
    except ValidationError:
        return _refuse_raw(Rejection.PROPOSAL_PARSE_FAILED.value, "parse", inp, events)
    events.append(
        Event("proposal.parsed", {"tool": proposal.tool, "version": proposal.tool_version})
    )
    return proposal


def _look_up(
    proposal: ToolProposal, inp: GateInput, events: list[Event]
) -> Tool[Any, Any] | Decision:
    """The registry layer: the tool exists, and every worker role serving it has it."""
    tool = inp.registry.get(proposal.tool, proposal.tool_version)
    if tool is None:
        return _refuse_raw(
            Rejection.UNKNOWN_TOOL_OR_VERSION.value,
            "registry",
            inp,
            events,
            f"the policy worker's registry has no {proposal.tool}@{proposal.tool_version} "
            f"(registry {inp.registry.fingerprint[:12]})",
        )
    lacking = inp.deployment(tool.name, tool.version) if inp.deployment else None
    if lacking:
        return _refuse_raw(Rejection.TOOL_NOT_DEPLOYED.value, "registry", inp, events, lacking)
    events.append(Event("proposal.registry.checked", {"tool": tool.name, "version": tool.version}))
    return tool


def _validate_input(
    proposal: ToolProposal, tool: Tool[Any, Any], inp: GateInput, events: list[Event]
) -> _Checked | Decision:
    """The input-schema layer: an object, within the size limit, valid for the contract."""
    if not isinstance(proposal.arguments, dict):
        return _refuse_raw(Rejection.INPUT_NOT_OBJECT.value, "schema", inp, events)
    size = len(json.dumps(proposal.arguments, default=str))
    if size > tool.max_input_bytes:
        return _refuse_raw(Rejection.INPUT_TOO_LARGE.value, "schema", inp, events)
    try:
        model = tool.parse_input(proposal.arguments)
        arguments = model.model_dump(mode="json")
        canonical_arguments = canonical_json(arguments)
        args_hash = sha256_hex(canonical_arguments)
    except ValidationError as exc:
        return _refuse_raw(_schema_code(exc), "schema", inp, events)
    except Exception:  # e.g. a number canonical JSON cannot represent
        return _refuse_raw(invalid_field_code("input"), "schema", inp, events)
    phash = proposal_hash(
        tool.name, tool.version, arguments, canonical_arguments=canonical_arguments
    )
    events.append(Event("proposal.schema.validated", {"arguments_hash": args_hash, "bytes": size}))
    return _Checked(proposal, tool, model, arguments, args_hash, phash)


def _validate_semantics(checked: _Checked, inp: GateInput, events: list[Event]) -> Decision | None:
    tool = checked.tool
    if tool.validate is not None:
        code = tool.validate(checked.model, inp.run.subject)
        if code:
            return _reject(code, "semantic", checked.proposal_hash, inp, events)
    events.append(Event("proposal.semantic.validated", {"tool": tool.name}))
    return None


def _check_grants(checked: _Checked, inp: GateInput, events: list[Event]) -> _Granted | Decision:
    """The authorization layer: a live, unexhausted grant in scope for every capability."""
    tool = checked.tool
    resource = tool.resource(checked.model, inp.run.subject)
    code, grant_ids = _authorize(tool, resource, inp)
    events.append(
        Event(
            "policy.capability.checked",
            {"required": list(tool.capabilities), "allowed": code is None, "code": code},
        )
    )
    if code:
        return _reject(code, "authorization", checked.proposal_hash, inp, events)
    return _Granted(resource, grant_ids)


def _guard_state(inp: GateInput, events: list[Event]) -> Ignore | None:
    """A message for another run state (or version) is stale: ignored, nothing recorded."""
    run = inp.run
    if (
        run.status is not RunStatus.RUNNING
        or run.phase is not Phase.POLICY
        or run.version != inp.expected_version
    ):
        return Ignore(f"state {run.status}/{run.phase} v{run.version}")
    events.append(Event("policy.state.checked", {"version": run.version}))
    return None


def _detect_loops(checked: _Checked, inp: GateInput, events: list[Event]) -> Halt | None:
    fp = checked.proposal_hash
    repeats = _repeats(fp, inp)
    if repeats > inp.run.budgets.max_repeated_proposal:
        events.append(Event("proposal.loop_detected", {"count": repeats}))
        return _fail(StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION, fp, events)
    if _oscillates(fp, inp):
        events.append(Event("proposal.oscillation_detected", {"window": 4}))
        return _fail(StopReason.PROPOSAL_OSCILLATION_DETECTED, fp, events)
    events.append(Event("policy.loop.checked", {"repeats": repeats}))
    return None


def _check_confirmation(
    checked: _Checked, granted: _Granted, inp: GateInput, events: list[Event]
) -> _Confirmed | Decision:
    tool, phash = checked.tool, checked.proposal_hash
    state, confirmation_id = _confirmation(tool, phash, inp)
    events.append(
        Event(
            "policy.confirmation.checked",
            {"policy": tool.confirmation.value, "result": state, "proposal_hash": phash},
        )
    )
    if state == "declined":
        return _reject(Rejection.CONFIRMATION_DECLINED.value, "confirmation", phash, inp, events)
    if state == "missing":
        return AwaitConfirmation(
            proposal=checked.proposal,
            tool=tool,
            arguments=checked.arguments,
            proposal_hash=phash,
            resource=granted.resource,
            events=events,
        )
    return _Confirmed(confirmation_id)


def _check_budgets(checked: _Checked, inp: GateInput, events: list[Event]) -> Halt | None:
    """The deadline and the tool-call budgets (overall and per tool)."""
    run, tool, fp = inp.run, checked.tool, checked.proposal_hash
    if inp.now >= run.deadline_at:
        return _fail(StopReason.DEADLINE_REACHED, fp, events)
    per_tool = run.budgets.max_tool_calls_per_tool.get(tool.name)
    if run.tool_calls >= run.budgets.max_tool_calls or (
        per_tool is not None and run.tool_calls_by_tool.get(tool.name, 0) >= per_tool
    ):
        return _fail(StopReason.MAX_TOOL_CALLS_REACHED, fp, events, tool=tool.name)
    events.append(
        Event(
            "policy.budget.checked",
            {"tool_calls": run.tool_calls, "max_tool_calls": run.budgets.max_tool_calls},
        )
    )
    return None
