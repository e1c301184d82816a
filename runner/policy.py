"""The policy gate: pure layers, in order, first failure wins.

    parse -> policy approval -> registry -> kill switch -> held capabilities -> input schema
    -> semantic validation -> authorization (grants) -> provenance -> state guard
    -> loop detection -> effects -> confirmation -> budget -> command

"held capabilities" is the authorization layer's first check, made before the arguments are
read: a tool for one of whose capabilities the run holds no grant at all is refused
``MISSING_CAPABILITY`` there, so a call with bad arguments cannot learn the tool's input
shape; the resource-scoped checks come after the semantic validation.

Each layer is one function and appends a trace event (names, codes, sizes, hashes only).
:func:`evaluate` is a pure function of (proposal, run state, grants, confirmations, history,
registry, now); its input, events and decisions are in :mod:`warrant.runner.gate`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from warrant.runner import delegation
from warrant.runner.canonical import (
    MAX_JSON_DEPTH,
    canonical_json,
    echoed_name,
    json_depth,
    proposal_hash,
    raw_fingerprint,
    sha256_hex,
)
from warrant.runner.codes import Phase, Rejection, RunStatus, StopReason, invalid_field_code
from warrant.runner.confirmation_rules import person_decision, pre_approval, required_policy
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
    cited_sources,
    source_observation_ids,
)
from warrant.runner.grants import authorize, resource_label, unheld_capability
from warrant.runner.observe import is_observed, let_through
from warrant.runner.provenance import provenance_of, refusal, trace_details, vouched
from warrant.runner.spec import ToolProposal
from warrant.runner.views import EffectView, HistoryEntry
from warrant.tools._contract import ConfirmationPolicy, Tool
from warrant.tools._deployment import lacking_role

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
    "earlier_effect",
    "evaluate",
]


def _schema_code(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    if any(e["type"] == "extra_forbidden" for e in errors):
        return Rejection.UNKNOWN_INPUT_FIELD.value
    loc = errors[0]["loc"] if errors else ()
    return invalid_field_code(str(loc[0]) if loc else "input")


def _repeats(fp: str, inp: GateInput) -> int:
    return repeats(fp, inp.history, version=inp.run.observation_version)


def _no_progress(
    fp: str, inp: GateInput, events: list[Event], *, cycles: bool = True
) -> Halt | None:
    """A cycle (unless not ``cycles``), or too many proposals in a row that added nothing
    (issue 34, progress)."""
    version, budgets = inp.run.observation_version, inp.run.budgets
    period = _cycle(fp, inp) if cycles else None
    if period is not None:
        events.append(
            Event("proposal.oscillation_detected", {"window": 2 * period, "period": period})
        )
        return _fail(StopReason.PROPOSAL_OSCILLATION_DETECTED, fp, events, period=period)
    steps = without_progress(inp.history, version=version)
    if steps > budgets.max_steps_without_new_observation:
        events.append(Event("proposal.no_progress", {"steps": steps}))
        return _fail(StopReason.STEPS_WITHOUT_NEW_OBSERVATION, fp, events, steps=steps)
    return None


def _cycle(fp: str, inp: GateInput) -> int | None:
    budgets = inp.run.budgets
    version = inp.run.observation_version
    return cycle_period(fp, inp.history, version=version, max_period=budgets.max_cycle_period)


def _loop_refusal(
    code: Rejection, fp: str, inp: GateInput, events: list[Event], message: str
) -> Reject:
    """``budgets.on_loop`` ``refuse`` (an agent's own loop): the looping call is refused with
    the loop's code and the run goes on (never itself checked for loops: it is one)."""
    details: dict[str, Any] = {"code": code.value, "layer": "loop_detection", "message": message}
    details["source_observation_ids"] = cited_sources(inp.raw)
    events.append(Event("proposal.rejected", details))
    return Reject(
        code=code.value, layer="loop_detection", fingerprint=fp, events=events, message=message
    )


def _reject(
    code: str,
    layer: str,
    fp: str | None,
    inp: GateInput,
    events: list[Event],
    *,
    message: str | None = None,
    earlier: dict[str, Any] | None = None,
    sources: Sequence[str] = (),
) -> Decision:
    """The proposal is refused; ``proposal.rejected`` names the observations it came from:
    those it cites (:func:`cited_sources`) and ``sources``, where the provenance layer
    found its argument values."""
    details: dict[str, Any] = {"code": code, "layer": layer}
    if message:
        details["message"] = message
    details["source_observation_ids"] = list(dict.fromkeys([*cited_sources(inp.raw), *sources]))
    events.append(Event("proposal.rejected", details))
    stops = inp.run.budgets.on_loop == "stop"  # refuse: a loop of refusals is refused anyway
    if stops and fp is not None and _repeats(fp, inp) > inp.run.budgets.max_repeated_proposal:
        events.append(Event("proposal.loop_detected", {"count": _repeats(fp, inp)}))
        return _fail(
            StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION, fp, events, last_code=code
        )
    if fp is not None and (halted := _no_progress(fp, inp, events, cycles=stops)) is not None:
        return halted  # refused proposals that go round in circles are no progress either
    return Reject(
        code=code, layer=layer, fingerprint=fp, events=events, message=message, earlier=earlier
    )


def _fail(reason: StopReason, fp: str | None, events: list[Event], **detail: Any) -> Halt:
    """The run fails (a loop, the deadline, a tool-call budget); ``detail`` is recorded."""
    return Halt(
        reason=reason, status=RunStatus.FAILED, fingerprint=fp, events=events, detail=detail
    )


def evaluate(inp: GateInput, *, on_event: Callable[[Event], None] | None = None) -> Decision:
    """Run the layers; ``on_event`` sees each layer's event as it happens (spans), not decides."""
    events: list[Event] = EventLog(on_event)
    proposal = _parse(inp, events)
    if not isinstance(proposal, ToolProposal):
        return proposal
    if (unapproved := _check_approved(inp, events)) is not None:
        return unapproved  # a policy nobody approved decides nothing (G21)
    tool = _look_up(proposal, inp, events)
    if not isinstance(tool, Tool):
        return tool
    if (switched_off := _check_switch(tool, inp, events)) is not None:
        return switched_off  # an operator disabled the tool: refused whatever the call says
    unheld = _check_held(proposal, tool, inp, events)
    if unheld is not None:
        return unheld  # no grant of a capability at all: refused before the arguments are read
    checked = _validate_input(proposal, tool, inp, events)
    if not isinstance(checked, _Checked):
        return checked
    refused = _validate_semantics(checked, inp, events)
    if refused is not None:
        return refused
    granted = _check_grants(checked, inp, events)
    if not isinstance(granted, _Granted):
        return granted
    narrowed = _check_delegation(checked, inp, events)
    if narrowed is not None:
        return narrowed  # a sub-run wider than its parent: refused before it exists
    if not isinstance(provenance := _check_provenance(checked, inp, events), dict | None):
        return provenance  # refused: a destination no trusted text supplied
    ignored = _guard_state(inp, events)
    if ignored is not None:
        return ignored
    looping = _detect_loops(checked, inp, events)
    if looping is not None:
        return looping
    effect = _check_effect(checked, inp, events)
    if not isinstance(effect, _Effect):
        return effect  # refused: the same business effect again (DUPLICATE_EFFECT)
    confirmed = _check_confirmation(checked, granted, provenance, inp, events, effect=effect)
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
        pre_approval_id=confirmed.pre_approval_id,
        provenance=provenance,
        events=events,
        effect_key=effect.key,
        repeat_of=effect.repeats,
    )


# --- the layers, in order: each returns what the next needs, or the decision ------------------


@dataclass(frozen=True)
class _Checked:
    """A proposal past the parse, registry and input-schema layers."""

    proposal: ToolProposal
    tool: Tool[Any, Any]
    model: Any  # the validated input model
    arguments: dict[str, Any]
    arguments_hash: str
    proposal_hash: str
    """Also the proposal's fingerprint for loop detection."""


@dataclass(frozen=True)
class _Granted:
    resource: str
    grant_ids: tuple[int, ...]


@dataclass(frozen=True)
class _Effect:
    """The call's business effect key (None: its tool declares none), and the earlier call
    with that key it asks to repeat (``repeat_effect``; a person must confirm it)."""

    key: str | None = None
    repeats: EffectView | None = None


@dataclass(frozen=True)
class _Confirmed:
    confirmation_id: str | None = None
    pre_approval_id: int | None = None


def _refuse_raw(
    code: str, layer: str, inp: GateInput, events: list[Event], message: str | None = None
) -> Decision:
    """Before the arguments are validated, loops are detected on the raw proposal."""
    return _reject(code, layer, raw_fingerprint(inp.raw), inp, events, message=message)


def _parse(inp: GateInput, events: list[Event]) -> ToolProposal | Decision:
    """The parse layer: a planner output no deeper than ``MAX_JSON_DEPTH`` (measured without
    recursion, before any layer walks it recursively), shaped as a tool proposal."""
    if json_depth(inp.raw) > MAX_JSON_DEPTH:
        deep = f"the proposal nests arrays and objects more than {MAX_JSON_DEPTH} levels deep"
        return _refuse_raw(Rejection.PROPOSAL_TOO_DEEP.value, "parse", inp, events, deep)
    try:
        proposal = ToolProposal.model_validate(inp.raw)
    except ValidationError:
        return _refuse_raw(Rejection.PROPOSAL_PARSE_FAILED.value, "parse", inp, events)
    events.append(
        Event(
            "proposal.parsed",
            {"tool": echoed_name(proposal.tool), "version": echoed_name(proposal.tool_version)},
        )
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
            f"the policy worker's registry has no {echoed_name(proposal.tool)}"
            f"@{echoed_name(proposal.tool_version)} "
            f"(registry {inp.registry.fingerprint[:12]})",
        )
    lacking = lacking_role(inp.deployment, tool.name, tool.version) if inp.deployment else None
    if lacking:
        return _refuse_raw(Rejection.TOOL_NOT_DEPLOYED.value, "registry", inp, events, lacking)
    if changed := inp.pins.get(f"{tool.name}@{tool.version}"):
        return _refuse_raw(Rejection.MCP_TOOL_CHANGED.value, "registry", inp, events, changed)
    events.append(Event("proposal.registry.checked", {"tool": tool.name, "version": tool.version}))
    return tool


def _check_approved(inp: GateInput, events: list[Event]) -> Decision | None:
    """The deployment policy's approval, right after the parse layer: with
    ``WARRANT_POLICY_APPROVAL=required`` a policy worker whose deployment policy no operator
    approved refuses every proposal ``POLICY_NOT_APPROVED``, whatever it names."""
    if inp.policy_approved is not False:
        return None
    named = (inp.policy_hash or "")[:12]
    message = (
        f"the deployment policy {named} is not approved: an operator approves it with "
        f"`warrant policy approve {inp.policy_hash} --by NAME`"
    )
    return _refuse_raw(Rejection.POLICY_NOT_APPROVED.value, "policy_approval", inp, events, message)


def _check_switch(tool: Tool[Any, Any], inp: GateInput, events: list[Event]) -> Decision | None:
    """The kill switch, right after the registry layer: a tool an operator disabled
    (``warrant tools disable``) is refused ``TOOL_DISABLED``, in observe mode too, before
    anything else about the call is read."""
    if tool.name not in inp.disabled:
        return None
    reason = inp.disabled[tool.name]
    message = f"an operator disabled the tool {tool.name}" + (f": {reason}" if reason else "")
    return _refuse_raw(Rejection.TOOL_DISABLED.value, "kill_switch", inp, events, message)


def _check_held(
    proposal: ToolProposal, tool: Tool[Any, Any], inp: GateInput, events: list[Event]
) -> Decision | None:
    """The authorization layer's first check, before the input schema: a tool one of whose
    capabilities no grant of the run names at all (whatever its scope) is refused
    ``MISSING_CAPABILITY`` on the raw proposal, so a call with bad arguments does not learn the
    tool's input shape. Resource-scoped checks stay in :func:`_check_grants`, and so does a
    tool in observe mode (it traces the refusal there and lets the call through)."""
    missing = unheld_capability(tool, inp.grants, run_id=inp.run.run_id)
    if missing is None or is_observed(tool.name, inp.observed):
        return None
    code = Rejection.MISSING_CAPABILITY.value
    checked = {"required": list(tool.capabilities), "allowed": False, "code": code}
    events.append(Event("policy.capability.checked", {**checked, "missing": missing}))
    return _reject(code, "authorization", _fingerprint(proposal, tool, inp), inp, events)


def _fingerprint(proposal: ToolProposal, tool: Tool[Any, Any], inp: GateInput) -> str | None:
    """A call refused before its schema layer: its proposal hash when its arguments are valid
    (the same call as it is known once granted: loop detection, a grant request), else its raw
    fingerprint. Bookkeeping only: the refusal is the same either way."""
    arguments = proposal.arguments
    if (
        isinstance(arguments, dict)
        and len(json.dumps(arguments, default=str)) <= tool.max_input_bytes
    ):
        try:
            valid = tool.parse_input(arguments).model_dump(mode="json")
            return proposal_hash(tool.name, tool.version, valid)
        except Exception:  # invalid: the raw proposal is all there is
            pass
    return raw_fingerprint(inp.raw)


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


def _check_delegation(checked: _Checked, inp: GateInput, events: list[Event]) -> Decision | None:
    """The delegation layer (a ``delegate`` call only): the child's grants and budgets must
    each be narrower than what the parent holds and has left (:mod:`~.delegation`)."""
    if checked.tool.name != delegation.DELEGATE_TOOL:
        return None
    found = delegation.gate_terms(checked.model, inp)
    if isinstance(found, delegation.Refusal):
        return _reject(
            found.code, "delegation", checked.proposal_hash, inp, events, message=found.message
        )
    events.append(
        Event(
            "policy.delegation.checked",
            {"grants": len(found.spec["grants"]), "reserved": found.reserved.as_json()},
        )
    )
    return None


def _check_grants(checked: _Checked, inp: GateInput, events: list[Event]) -> _Granted | Decision:
    """The authorization layer: a live, unexhausted grant in scope for every capability (and,
    for typed resources, for every value of every resource argument)."""
    tool = checked.tool
    resource = resource_label(tool, checked.model, checked.arguments, inp.run.subject)
    allowed = authorize(tool, resource=resource, arguments=checked.arguments, inp=inp)
    code = allowed.code
    events.append(
        Event(
            "policy.capability.checked",
            {"required": list(tool.capabilities), "allowed": code is None, "code": code},
        )
    )
    why, layer = allowed.message, "authorization"
    if code and not let_through(
        inp.observed, events, tool=tool.name, code=code, layer=layer, message=why
    ):
        return _reject(code, layer, checked.proposal_hash, inp, events, message=why)
    return _Granted(resource, allowed.grant_ids)


def _check_provenance(
    checked: _Checked, inp: GateInput, events: list[Event]
) -> dict[str, Any] | Decision | None:
    """The provenance layer (write and egress tools): :mod:`warrant.runner.provenance`."""
    found = provenance_of(checked.tool, checked.arguments, checked.proposal, inp.provenance)
    if found is None:
        return None
    found = vouched(found, pre_approved=pre_approval(checked.proposal_hash, inp) is not None)
    events.append(Event("policy.provenance.checked", trace_details(found)))
    if (refused := refusal(found)) is not None:
        code, message = refused
        return _reject(
            code.value,
            "provenance",
            checked.proposal_hash,
            inp,
            events,
            message=message,
            sources=source_observation_ids(found),
        )
    return found


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


def _detect_loops(checked: _Checked, inp: GateInput, events: list[Event]) -> Decision | None:
    """A repeat or a cycle stops the run, or, ``budgets.on_loop`` ``refuse``, refuses this
    call (the run goes on); too many steps without a new observation stop it either way."""
    fp = checked.proposal_hash
    repeats = _repeats(fp, inp)
    refuse = inp.run.budgets.on_loop == "refuse"
    if repeats > inp.run.budgets.max_repeated_proposal:
        events.append(Event("proposal.loop_detected", {"count": repeats}))
        if refuse:
            why = "the same call again with no new observation since: its answer is known"
            return _loop_refusal(
                Rejection.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION, fp, inp, events, why
            )
        return _fail(StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION, fp, events)
    if refuse and (period := _cycle(fp, inp)) is not None:
        events.append(
            Event("proposal.oscillation_detected", {"window": 2 * period, "period": period})
        )
        why = "the call closes a cycle of calls again with no new observation since"
        return _loop_refusal(Rejection.PROPOSAL_OSCILLATION_DETECTED, fp, inp, events, why)
    if (halted := _no_progress(fp, inp, events, cycles=not refuse)) is not None:
        return halted
    events.append(Event("policy.loop.checked", {"repeats": repeats}))
    return None


def earlier_effect(
    tool: Tool[Any, Any], key: str, effects: Sequence[EffectView], *, run_id: str
) -> EffectView | None:
    """The newest earlier call with ``key`` that makes this one a duplicate: of this run, or
    of another within the tool's ``effect_window_s``, that succeeded, whose effect is unknown
    or that is still in flight (a failed or refused one does not count)."""
    window = tool.effect_window_s
    return next(
        (
            e
            for e in effects
            if e.key == key and e.blocks and (e.run_id == run_id or e.age_s <= window)
        ),
        None,
    )


def _check_effect(checked: _Checked, inp: GateInput, events: list[Event]) -> _Effect | Decision:
    """The effects layer: a tool that declares a business effect key refuses a call whose
    key an earlier call already has (:func:`earlier_effect`), unless the proposal asks to
    repeat it (``repeat_effect``: then a person must confirm, see
    :func:`_check_confirmation`)."""
    tool, phash = checked.tool, checked.proposal_hash
    key = tool.effect_key_of(checked.arguments)
    if key is None:
        return _Effect()
    earlier = earlier_effect(tool, key, inp.effects, run_id=inp.run.run_id)
    repeat = checked.proposal.repeat_effect
    details = {
        "key_sha256": sha256_hex(key.encode())[:16],
        "earlier": None if earlier is None else earlier.status,
        "repeat": repeat,
    }
    events.append(Event("policy.effect.checked", details))
    if earlier is None:
        return _Effect(key)
    if repeat:
        return _Effect(key, earlier)
    shown = earlier.shown(run_id=inp.run.run_id)
    where = "this run" if shown["same_run"] else f"run {earlier.run_id}"
    branch = f", call {earlier.branch}" if earlier.branch else ""
    seen = f", observation {earlier.observation_id}" if earlier.observation_id else ""
    message = (
        f"the same effect ({tool.name}'s effect key) was already {earlier.status} in {where} "
        f"(step {earlier.step}{branch}{seen}): not done again; propose it with "
        "repeat_effect: true to ask a person to repeat it"
    )
    code = Rejection.DUPLICATE_EFFECT.value
    return _reject(code, "effects", phash, inp, events, message=message, earlier=shown)


def _check_confirmation(
    checked: _Checked,
    granted: _Granted,
    provenance: dict[str, Any] | None,
    inp: GateInput,
    events: list[Event],
    *,
    effect: _Effect,
) -> _Confirmed | Decision:
    """A person's decision bound to the proposal, or a pre-approval of it, where the tool's
    side-effect class, its contract or the provenance layer asks for one, and for a call
    that repeats an earlier one's business effect (``repeat_effect``: a person only)."""
    tool, phash = checked.tool, checked.proposal_hash
    flagged = bool(provenance and provenance["flagged"])
    repeats = effect.repeats.shown(run_id=inp.run.run_id) if effect.repeats else None
    confirm_writes = bool(inp.run_policy.get("confirm_writes"))
    policy, why = required_policy(
        tool, relaxed=inp.relaxed, flagged=flagged, confirm_writes=confirm_writes
    )
    if repeats is not None:  # neither relaxed nor pre-approved: a person says repeat it
        policy, why, flagged = ConfirmationPolicy.PER_CALL, "repeat_effect", True
    if why == "relaxed":
        relaxed = {"tool": tool.name, "side_effect": tool.side_effect.value}
        events.append(Event("policy.confirmation.relaxed", relaxed))
    state, confirmation_id = "ok", None
    if policy is not ConfirmationPolicy.NEVER:
        state, confirmation_id = person_decision(tool, policy, phash, inp)
    pre = pre_approval(phash, inp) if state == "missing" and not flagged else None
    result = "pre-approved" if pre else state
    details = {"policy": policy.value, "why": why, "result": result, "proposal_hash": phash}
    events.append(Event("policy.confirmation.checked", details))
    if state == "declined":
        return _reject(Rejection.CONFIRMATION_DECLINED.value, "confirmation", phash, inp, events)
    if pre is not None:
        return _Confirmed(pre_approval_id=pre.pre_approval_id)
    if state == "missing":
        return AwaitConfirmation(
            proposal=checked.proposal,
            tool=tool,
            arguments=checked.arguments,
            proposal_hash=phash,
            resource=granted.resource,
            events=events,
            provenance=provenance,
            effect_key=effect.key,
            repeats=repeats,
            per_run=policy is ConfirmationPolicy.PER_RUN,
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


# -- Progress, as pure counts over a run's earlier proposals (the gate's loop layer,
# :func:`_no_progress` above): the same proposal again, a cycle of proposals, and proposals in a
# row that added no new observation. ``history`` holds the run's earlier tool proposals (their
# fingerprints and the observation version each was made at), oldest first.


def repeats(fp: str, history: Sequence[HistoryEntry], *, version: int) -> int:
    """1 + earlier proposals with this fingerprint and no new observation since."""
    return 1 + sum(1 for h in history if h.fingerprint == fp and h.observation_version == version)


def cycle_period(
    fp: str, history: Sequence[HistoryEntry], *, version: int, max_period: int
) -> int | None:
    """The period of a cycle this proposal completes twice (A-B-A-B, A-B-C-A-B-C, ... up to
    ``max_period``) with no new observation since it began; None if there is none."""
    seq = [h.fingerprint for h in history if h.observation_version == version] + [fp]
    for period in range(2, max_period + 1):
        tail = seq[-2 * period :]
        cycle = tail[period:]
        if len(tail) == 2 * period and tail[:period] == cycle and len(set(cycle)) == period:
            return period
    return None


def without_progress(history: Sequence[HistoryEntry], *, version: int) -> int:
    """This proposal and the earlier ones made since the last new observation."""
    return 1 + sum(1 for h in history if h.observation_version == version)
