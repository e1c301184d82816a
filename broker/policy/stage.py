"""Policy stage: run the pure gate on the pending proposal and act on its decision."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from warrant.broker import telemetry
from warrant.broker.context import StageContext
from warrant.broker.faults import crash_point
from warrant.broker.handoff_entry import enter_handoff
from warrant.broker.policy._asks import (
    ask_person,
    asks,
    await_grant,
    call_request,
    shown_to_person,
    trace_events,
)
from warrant.broker.publish import Outbox
from warrant.broker.tool.permission_waits import command_write
from warrant.broker.transitions import tool_message
from warrant.ledger import rows
from warrant.ledger.db import session_scope
from warrant.ledger.effect_keys import EffectMoved, lock_keys, recheck
from warrant.ledger.guarded import (
    update_proposal,
    use_confirmation,
    use_grants,
    use_pre_approval,
)
from warrant.ledger.memory_views import POLICY_OBSERVATION_TTL_STEPS
from warrant.ledger.repo import NewObservation, StaleVersion, commit, run_view, to_datetime
from warrant.ledger.stage_loads import (
    PolicyLoad,
    autocommit,
    confirmations_from,
    history_from,
    pre_approvals_from,
)
from warrant.runner import fan_in, policy
from warrant.runner import run_machine as machine
from warrant.runner.canonical import echoed_name, idempotency_token
from warrant.runner.codes import (
    CommandStatus,
    ObservationKind,
    ObservationSource,
    RunStatus,
    StopReason,
)
from warrant.runner.gate import cited_sources
from warrant.runner.handoff import artifacts_made, with_artifacts
from warrant.runner.policy_version import approval_hash, policy_version
from warrant.runner.provenance import sources_from
from warrant.runner.run_machine import Stop
from warrant.runner.spec import DEFAULT_MAX_PARALLEL_CALLS, ParallelProposal
from warrant.runner.views import GrantView, RunView
from warrant.tools._mcp_pins import McpDefinition, changed_fields

__all__ = ["policy_evaluate"]

log = logging.getLogger("warrant.policy")


def _outcome_name(decision: object) -> str:
    code = getattr(decision, "code", None) or getattr(decision, "reason", None)
    name = type(decision).__name__.lower()
    return f"{name}:{code}" if code else name


#: Decisions made again when another run's command with the same business effect key was
#: written between a decision's read and its write (:class:`EffectMoved`); then ignored (the
#: stalled-run sweep publishes the run again).
EFFECT_DECISIONS = 3


def policy_evaluate(ctx: StageContext, run_id: str, version: int) -> str:
    """:func:`decide_once`, made again on fresh facts when a command with one of the
    proposal's business effect keys was written meanwhile by another run's policy worker."""
    for attempt in range(1, EFFECT_DECISIONS + 1):
        try:
            return decide_once(ctx, run_id, version)
        except EffectMoved:
            log.info("policy run=%s: an effect key moved, deciding again (%d)", run_id, attempt)
    return "ignored"


def decide_once(ctx: StageContext, run_id: str, version: int) -> str:
    """Returns ``ignored``, ``rejected:<code>``, ``stopped:<status>:<reason>``, ``waiting``,
    ``waiting_grant:<code>``, ``handoff`` or ``accepted``.

    Load → decide → commit → publish: one read (:meth:`~warrant.ledger.stage_loads.PolicyLoad.read`:
    the run, its pending proposal, grants, confirmations, loop history, live registrations, an
    MCP tool's pin, the refusals a persistent injection counts, a refused command issued again),
    the pure gate and the steps around it (:func:`_decide`), one write (the transition with the
    proposal's verdict and, if accepted, the command: :func:`_commit`), then the message that
    write calls for."""
    now = ctx.clock()
    checked = approval_hash(ctx.registry, ctx.settings)  # None: no approval is required
    load = PolicyLoad.read(ctx.engine, run_id, version, ctx.registry, policy_hash=checked)
    if load is None:
        return "ignored"
    view = run_view(load.row)
    parallel = fan_in.parallel_of(load.row.proposal)
    if parallel is not None:  # several calls in one step: each gated, the set's budget first
        return _fan_out(ctx, view, load, parallel, version, now)
    decision = _decide(ctx, view, load, now)
    if isinstance(decision, policy.Ignore):
        log.info("policy ignoring run=%s: %s", run_id, decision.reason)
        return "ignored"
    try:
        committed = _commit(ctx, view, load, decision, version, now)
    except EffectMoved:
        raise
    except StaleVersion:
        return "ignored"
    if isinstance(committed, str):  # handed to a person (its own transaction): nothing follows
        return committed
    result, send = committed
    crash_point("policy:after_commit", run_id)
    if send is not None:
        outbox = Outbox()
        outbox.add(send)
        outbox.flush()
    return result


def _commit(
    ctx: StageContext,
    view: RunView,
    load: PolicyLoad,
    decision: policy.Accept | policy.Reject | policy.Halt | policy.AwaitConfirmation,
    version: int,
    now: float,
) -> tuple[str, Callable[[], None] | None] | str:
    """The decision's one write: the stage's result and the message to publish after it (or,
    for a run handed to a person instead, only the result)."""
    run_id, row = view.run_id, load.row
    if isinstance(decision, policy.Accept) and _across_runs(decision):
        with session_scope(ctx.engine) as s:  # a transaction: the key's lock, then the write
            effects_still(s, view, load, [decision])
            return "accepted", _accept(ctx, s, view, load, decision, now)
    send: Callable[[], None] | None = None
    with autocommit(ctx.engine) as conn:
        if isinstance(decision, policy.Reject) and asks(row, decision):
            result = await_grant(ctx, conn, view, load, decision)
        elif isinstance(decision, policy.Reject):
            if persistent(row):
                return _handoff(ctx, run_id, version, row.proposal["id"], influence(decision))
            send = _reject(ctx, conn, view, row.proposal, decision)
            result = f"rejected:{decision.code}"
        elif isinstance(decision, policy.Halt):
            if _looping(decision) and (row.handoff or {}).get("on_repeated_proposal"):
                return _handoff(ctx, run_id, version, row.proposal["id"], decision)
            result = _stop(conn, view, row.proposal, decision, made=artifacts_made(row.made))
        elif isinstance(decision, policy.AwaitConfirmation):
            asked = shown_to_person(ctx, decision, view)
            result = ask_person(ctx, conn, view, row.proposal, asked, now)
        else:
            send = _accept(ctx, conn, view, load, decision, now)
            result = "accepted"
    return result, send


def _decide(ctx: StageContext, view: RunView, load: PolicyLoad, now: float) -> policy.Decision:
    """The pure gate on the loaded proposal, in a span with per-layer events."""
    row, grants = load.row, load.grants
    run_id, proposal = view.run_id, row.proposal
    pid = proposal["proposal_id"]
    with telemetry.span(
        "policy.evaluate", run_id=run_id, proposal_id=pid, tool=echoed_name(proposal["tool"] or "")
    ) as sp:
        decision = policy.evaluate(
            _gate_input(ctx, view, load, raw=proposal["raw"], pins=pin_refusals(load.pin), now=now),
            on_event=telemetry.layer_observer(run_id=run_id, proposal_id=pid),
        )
        decision = versioned(ctx, proposal, grants, row.run_policy, decision)
        if sp is not None:
            sp.set_attribute("warrant.outcome", _outcome_name(decision))
    return decision


def _gate_input(
    ctx: StageContext,
    view: RunView,
    load: PolicyLoad,
    *,
    raw: Any,
    pins: dict[str, str],
    now: float,
) -> policy.GateInput:
    """What the gate judges ``raw`` with: the run, its grants, confirmations, loop history,
    pre-approvals and provenance from the one load, the registry and the deployment's
    settings; ``pins``: the MCP tools' definitions that are not the pinned ones."""
    row = load.row
    return policy.GateInput(
        raw=raw,
        run=view,
        expected_version=view.version,
        grants=load.grants,
        confirmations=confirmations_from(view.run_id, row.confirmations),
        history=history_from(row.history),
        registry=ctx.registry,
        now=now,
        deployment=load.deployment,
        pins=pins,
        relaxed=ctx.settings.relaxed_tools,
        observed=ctx.settings.observed_tools,
        pre_approvals=pre_approvals_from(row.pre_approvals),
        effects=load.effects,
        run_policy=row.run_policy or {},
        disabled=row.disabled_tools or {},
        policy_approved=row.policy_approved,
        policy_hash=approval_hash(ctx.registry, ctx.settings),
        provenance=None
        if load.provenance is None
        else sources_from(
            *load.provenance,
            attributions=ctx.registry.attributions(),
            listings=ctx.registry.listings(),
            privates=ctx.registry.privates(),
        ),
    )


def _looping(decision: policy.Halt) -> bool:
    return decision.reason in (
        StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION,
        StopReason.PROPOSAL_OSCILLATION_DETECTED,
        StopReason.STEPS_WITHOUT_NEW_OBSERVATION,
    )


def _reject(
    ctx: StageContext, conn: Any, view: RunView, proposal: dict[str, Any], decision: policy.Reject
) -> Callable[[], None]:
    """A refused proposal: its observation for the planner, and the step is planned again."""
    step = proposal["step"]
    named = echoed_name(proposal["tool"]) if proposal["tool"] else proposal["tool"]
    content = {"code": decision.code, "layer": decision.layer, "tool": named}
    if decision.message:
        content["message"] = decision.message
    if decision.earlier:  # DUPLICATE_EFFECT: the earlier call the caller is shown
        content["earlier"] = decision.earlier
    new_version = commit(
        conn,
        machine.replan(view, why=trace_events(decision.events)),
        step=step,
        proposal_id=proposal["proposal_id"],
        observation=NewObservation(
            f"policy-{step}",
            ObservationKind.POLICY_REJECTION,
            ObservationSource.POLICY.value,
            content,
            step + POLICY_OBSERVATION_TTL_STEPS,
        ),
        guarded=[
            update_proposal(
                proposal["id"],
                {
                    "status": "rejected",
                    "rejection_code": decision.code,
                    "fingerprint": decision.fingerprint,
                },
            )
        ],
    )
    run_id = view.run_id
    return lambda: ctx.publisher.planner(run_id, new_version)


def _stop(
    conn: Any, view: RunView, proposal: dict[str, Any], decision: policy.Halt, *, made: Any
) -> str:
    """``made``: the run's artifacts, from the load (a budget stop lists them)."""
    step = proposal["step"]
    stop = with_artifacts(Stop(decision.status, decision.reason, decision.detail), made)
    commit(
        conn,
        machine.stop(view, stop, step=step, events=trace_events(decision.events)),
        step=step,
        proposal_id=proposal["proposal_id"],
        guarded=[
            update_proposal(
                proposal["id"], {"status": "stopped", "fingerprint": decision.fingerprint}
            )
        ],
    )
    return f"stopped:{stop.status.value}:{stop.reason.value}"


def _handoff(ctx: StageContext, run_id: str, version: int, pk: int, decision: Any) -> str:
    """A loop the run spec wants a person to look at (rare: the ORM path is fine)."""
    with session_scope(ctx.engine) as s:
        run = rows.lock_run(s, run_id)
        if run is None or run.version != version:
            return "ignored"
        rows.set_proposal(s, pk, status="stopped", fingerprint=decision.fingerprint)
        enter_handoff(
            s,
            run,
            reason=decision.reason.value,
            registry=ctx.registry,
            events=trace_events(decision.events),
        )
    return "handoff"


def _command_writes(
    view: RunView,
    proposal: dict[str, Any],
    decision: policy.Accept,
    command_id: str,
    timeout: float,
    now: float,
    *,
    prior: Any = None,
) -> list[Any]:
    """What an accepted proposal writes with its transition: the proposal's verdict, the
    command (with its stable idempotency token), the grant uses and the confirmation's use."""
    tool = decision.tool
    run_id = view.run_id
    pid = decision.proposal.proposal_id
    token = idempotency_token(run_id, pid, tool.version, decision.arguments_hash)
    guarded = [
        update_proposal(
            proposal["id"],
            {
                "status": "accepted",
                "tool_version": tool.version,
                "arguments": decision.arguments,
                "fingerprint": decision.proposal_hash,
                "proposal_hash": decision.proposal_hash,
                "provenance": decision.provenance,
            },
        ),
        command_write(
            prior,
            {
                "id": command_id,
                "run_id": run_id,
                "proposal_pk": proposal["id"],
                "proposal_id": pid,
                "step": proposal["step"],
                "tool": tool.name,
                "tool_version": tool.version,
                "arguments": decision.arguments,
                "arguments_hash": decision.arguments_hash,
                "idempotency_token": token,
                "status": CommandStatus.ISSUED.value,
                "attempts": 0,
                "timeout_s": timeout,
                "deadline_at": to_datetime(now + timeout),
                "confirmation_id": decision.confirmation_id,
                "grant_ids": list(decision.grant_ids),
                "effect_key": decision.effect_key,
            },
        ),
    ]
    if decision.grant_ids:
        guarded.append(use_grants(list(decision.grant_ids)))
    if decision.confirmation_id:
        guarded.append(use_confirmation(decision.confirmation_id, to_datetime(now)))
    if decision.pre_approval_id is not None:
        guarded.append(use_pre_approval(decision.pre_approval_id, pid, to_datetime(now)))
    return guarded


def _accept(
    ctx: StageContext,
    conn: Any,
    view: RunView,
    load: PolicyLoad,
    decision: policy.Accept,
    now: float,
) -> Callable[[], None]:
    tool = decision.tool
    run_id, proposal = view.run_id, load.row.proposal
    timeout = max(0.001, min(tool.timeout_s, view.deadline_at - now))
    prior = load.refused_command  # its tool refused it for a permission: a grant came
    command_id = str(uuid.uuid4()) if prior is None else prior.id
    pid = decision.proposal.proposal_id
    guarded = _command_writes(view, proposal, decision, command_id, timeout, now, prior=prior)
    change = machine.issue_command(
        view,
        command_id=command_id,
        tool=tool.name,
        issued={
            "version": tool.version,
            "timeout_s": round(timeout, 3),
            "arguments_hash": decision.arguments_hash,
        },
        events=trace_events(decision.events),
    )
    new_version = commit(
        conn,
        change,
        step=proposal["step"],
        proposal_id=pid,
        guarded=guarded,
    )
    return tool_message(ctx, run_id, new_version, command_id, tool.name, timeout_s=timeout)


# -- Business effect keys across runs (``Tool.effect_window_s``): two policy workers of two runs
# may decide calls with one key at once. The write that issues such a command takes the key's
# advisory lock and reads again (:mod:`warrant.ledger.effect_keys`); a command that appeared
# meanwhile raises :class:`EffectMoved` and :func:`policy_evaluate` decides again. Within a
# run no lock is needed: the run's compare-and-set orders its decisions.


def _across_runs(decision: policy.Accept) -> bool:
    return decision.effect_key is not None and decision.tool.effect_window_s > 0


def effects_still(s: Any, view: RunView, load: PolicyLoad, accepted: list[policy.Accept]) -> None:
    """In the write's transaction: lock the keys the accepted calls share across runs and
    raise :class:`EffectMoved` if a command with one of them appeared since the load."""
    across = [d for d in accepted if _across_runs(d)]
    keys = [d.effect_key for d in across if d.effect_key is not None]
    if not keys:
        return
    lock_keys(s, keys)
    window = max(d.tool.effect_window_s for d in across)
    recheck(s, view.run_id, keys, window, known=load.effects)


# -- A persistent injection (``handoff.after_untrusted_refusals``): when one more refused tool
# proposal reaches the spec's limit, counted from the run's first untrusted read, the policy
# stage hands the run to a person (``UNTRUSTED_INFLUENCE``) instead of planning again.


def persistent(row: Any) -> bool:
    """One more refusal reaches the spec's ``handoff.after_untrusted_refusals`` (the load
    counted them only when the spec asks)."""
    limit = (row.handoff or {}).get("after_untrusted_refusals")
    return limit is not None and row.untrusted_refusals + 1 >= limit


def influence(decision: policy.Reject) -> policy.Halt:
    """The refusal that ends a persistent injection's run in a person's hands."""
    reason = StopReason.UNTRUSTED_INFLUENCE
    detail = {"last_code": decision.code}
    return policy.Halt(
        reason=reason,
        status=RunStatus.HANDOFF,
        fingerprint=decision.fingerprint,
        events=decision.events,
        detail=detail,
    )


# -- The policy stage's record of which policy decided: every decision of the gate (accepted,
# refused, waiting for a person, halted) gets a ``policy.versioned`` trace event with its policy
# version (:mod:`warrant.runner.policy_version`) and the decision it versions.


def _decision_name(decision: policy.Decision) -> str:
    if isinstance(decision, policy.Accept):
        return "accepted"
    if isinstance(decision, policy.AwaitConfirmation):
        return "needs_confirmation"
    if isinstance(decision, policy.Reject):
        return "refused"
    return "halted"


def versioned(
    ctx: StageContext,
    proposal: dict[str, Any],
    grants: Sequence[GrantView],
    run_policy: dict[str, Any] | None,
    decision: policy.Decision,
) -> policy.Decision:
    """``decision`` with a last ``policy.versioned`` event (an ignored message: unchanged)."""
    if isinstance(decision, policy.Ignore):
        return decision
    tool = ctx.registry.get(proposal.get("tool") or "", proposal.get("tool_version") or "")
    settings = ctx.settings
    version = policy_version(
        tool=tool,
        grants=grants,
        relaxed_tools=settings.relaxed_tools,
        approvals_floor=settings.approvals_floor if settings.approvals_required else None,
        run_policy=run_policy,
    )
    details = {**version.details(), "decision": _decision_name(decision)}
    event = policy.Event("policy.versioned", details)
    return dataclasses.replace(decision, events=[*decision.events, event])


# -- The policy gate's ``pins`` question (:class:`warrant.runner.gate.GateInput`): is the MCP
# tool's definition, as the policy worker's registry got it from its server, the pinned one?
# The first use of a tool pins it; afterwards another definition is refused
# (``MCP_TOOL_CHANGED``) until an operator accepts it (``warrant mcp accept``).


def pin_refusals(pin: tuple[str, McpDefinition, str, dict[str, Any]] | None) -> dict[str, str]:
    """The gate's ``pins`` for the proposal's tool, from the load's served and pinned
    definitions: why the served one is not the pinned one, keyed ``name@version`` (empty: no
    MCP tool, or pinned)."""
    if pin is None:
        return {}
    key, served, pinned_hash, pinned = pin
    if pinned_hash == served.hash:
        return {}
    changed = ", ".join(changed_fields(pinned, served.definition)) or "definition"
    why = (
        f"MCP server {served.server} serves another definition of {served.tool} than the "
        f"one accepted ({changed} changed; pinned {pinned_hash}, served {served.hash}): "
        f"an operator accepts it with `warrant mcp accept {served.server} {served.tool}`"
    )
    return {key: why}


# -- A parallel step (``kind: parallel``, :mod:`warrant.runner.fan_in`): the set's own checks
# (how many calls, the budget for all of them) refuse it whole; otherwise each call goes through
# the whole gate on its own, seeing the grant uses, pre-approvals and confirmations the calls
# before it took. A call that needs a person makes the set wait for that person (one call at a
# time, each by its hash); a call the loop layers halt halts the run, as a single one would.
# The accepted calls are one command each, written with the run's ``fan_out`` in one
# transaction and published together.


Branch = tuple[int, Any, policy.Decision]


def _refused_whole(refusal: Any, proposal: dict[str, Any]) -> dict[str, Any]:
    """``proposal.rejected`` of a parallel step refused whole: the code, why, and the
    observations its calls cite."""
    cited = cited_sources(proposal.get("raw"))
    return {"code": refusal.code.value, **refusal.detail, "source_observation_ids": cited}


def _fan_out(
    ctx: StageContext,
    view: RunView,
    load: PolicyLoad,
    parallel: ParallelProposal,
    version: int,
    now: float,
) -> str:
    row = load.row
    proposal = row.proposal
    max_calls = (row.run_policy or {}).get("max_parallel_calls", DEFAULT_MAX_PARALLEL_CALLS)
    refusal = fan_in.check_set(view, parallel, max_calls=int(max_calls))
    if refusal is not None:
        refused = policy.Reject(
            code=refusal.code.value,
            layer="budgets",
            fingerprint=None,
            events=[policy.Event("proposal.rejected", _refused_whole(refusal, proposal))],
            message=f"the parallel step is refused whole: {refusal.detail}",
        )
        with autocommit(ctx.engine) as conn:
            try:
                send = _reject(ctx, conn, view, proposal, refused)
            except StaleVersion:
                return "ignored"
        send()
        return f"rejected:{refusal.code.value}"
    branches = _decide_calls(ctx, view, load, parallel, now)
    if any(isinstance(d, policy.Ignore) for _, _, d in branches):
        return "ignored"
    waiting = _await_people(ctx, view, load, branches, now)
    if waiting is not None:  # nothing of the set runs before a grant or a person's decisions
        return waiting
    halted = next((d for _, _, d in branches if isinstance(d, policy.Halt)), None)
    if halted is not None:
        with autocommit(ctx.engine) as conn:
            try:
                return _stop(conn, view, proposal, halted, made=artifacts_made(row.made))
            except StaleVersion:
                return "ignored"
    try:
        result, sends = _commit_set(ctx, view, load, parallel, branches, version, now)
    except EffectMoved:
        raise
    except StaleVersion:
        return "ignored"
    crash_point("policy:after_commit", view.run_id)
    outbox = Outbox()
    for send in sends:
        outbox.add(send)
    outbox.flush()
    return result


def _await_people(
    ctx: StageContext, view: RunView, load: PolicyLoad, branches: list[Branch], now: float
) -> str | None:
    """A call refused for a grant the spec says to ask for: the set waits for that grant
    (the gate then looks at the set again). Else calls that need a person: the set waits for
    their decisions (:func:`_await_call`). ``None``: nothing to wait for."""
    lacking = next(
        (
            (number, call, d)
            for number, call, d in branches
            if isinstance(d, policy.Reject) and asks(load.row, d) and isinstance(call, dict)
        ),
        None,
    )
    if lacking is not None:
        number, call, refused = lacking
        with autocommit(ctx.engine) as conn:
            try:
                return await_grant(ctx, conn, view, load, refused, call=(number, call))
            except StaleVersion:
                return "ignored"
    if any(isinstance(d, policy.AwaitConfirmation) for _, _, d in branches):
        return _await_call(ctx, view, load, branches, now)
    return None


def _await_call(
    ctx: StageContext, view: RunView, load: PolicyLoad, branches: list[Branch], now: float
) -> str:
    """The set waits for a person's decision on each of its calls that needs one, together:
    each keeps its own request and hash (the inbox, the API and the CLI confirm or decline
    each by its hash, or several at once), and the gate looks at the set again once every one
    is decided. The step's proposal carries the first one's request, with the whole set."""
    asked = {
        number: shown_to_person(ctx, decision, view)
        for number, _, decision in branches
        if isinstance(decision, policy.AwaitConfirmation)
    }
    requests = {number: call_request(ctx, decision) for number, decision in asked.items()}
    p = load.row.proposal
    parallel = {"step": p["step"], "calls": fan_in.shown(branches, ctx.registry, requests)}
    with autocommit(ctx.engine) as conn:
        try:
            return ask_person(ctx, conn, view, p, asked[min(asked)], now, parallel=parallel)
        except StaleVersion:
            return "ignored"


def _decide_calls(
    ctx: StageContext, view: RunView, load: PolicyLoad, parallel: ParallelProposal, now: float
) -> list[Branch]:
    """Each call through the whole gate (:func:`warrant.runner.fan_in.gate_calls`), with
    the pins of every MCP tool among the calls, each decision versioned."""
    row, run_id = load.row, view.run_id
    pins: dict[str, str] = {}
    for pin in load.set_pins:
        pins |= pin_refusals(pin)
    base = _gate_input(ctx, view, load, raw=None, pins=pins, now=now)
    observer = telemetry.layer_observer(run_id=run_id, proposal_id=parallel.proposal_id)
    return [
        (number, call, versioned(ctx, fan_in.named(call), load.grants, row.run_policy, decision))
        for number, call, decision in fan_in.gate_calls(base, parallel.calls, on_event=observer)
    ]


def _commit_set(
    ctx: StageContext,
    view: RunView,
    load: PolicyLoad,
    parallel: ParallelProposal,
    branches: list[Branch],
    version: int,
    now: float,
) -> tuple[str, list[Callable[[], None]]]:
    """The set's one write: a proposal row per call, a command per accepted call (its own
    token; its deadline cut to the branch deadline), the grant, pre-approval and
    confirmation uses, and the run's ``fan_out``; or, when the merge rule can no longer hold
    with the accepted calls, the refusals as the planner's observation."""
    run_id, proposal = view.run_id, load.row.proposal
    step = proposal["step"]
    deadline_at = None
    if parallel.branch_deadline_s is not None:
        deadline_at = min(now + parallel.branch_deadline_s, view.deadline_at)
    plans: list[fan_in.BranchPlan] = []
    issued: list[tuple[Any, int]] = []  # each accepted call's command, and its call's number
    events: list[tuple[str, dict[str, Any]]] = []
    with session_scope(ctx.engine) as s:
        _lock_set(s, view, load, branches, version)
        for number, call, decision in branches:
            assert not isinstance(decision, policy.Ignore)
            events.extend(trace_events(decision.events))
            command = rows.add_branch(
                s, view, proposal, number, call, decision, deadline_at=deadline_at, now=now
            )
            plans.append(fan_in.BranchPlan.of(number, call, decision, command))
            if command is not None:
                issued.append((command, number))
        fan = fan_in.FanOut.of(parallel, step=step, deadline_at=deadline_at, plans=plans)
        decided, states = fan_in.planned(fan)
        if decided.decided:  # nothing runs: the rule cannot hold with the calls accepted
            replan = _refuse_set(ctx, s, view, proposal, fan, states, decided, events, now)
            return "rejected:parallel", [replan]
        rows.set_proposal(s, proposal["id"], status="accepted")
        change = machine.fan_out(
            view,
            issued=[(c.id, c.tool, {"version": c.tool_version, "branch": n}) for c, n in issued],
            fanned=fan.to_json(),
            events=events,
        )
        new_version = commit(s, change, step=step, proposal_id=parallel.proposal_id)
    publish: list[Callable[[], None]] = [
        tool_message(
            ctx, run_id, new_version, command.id, command.tool, timeout_s=command.timeout_s
        )
        for command, _ in issued
    ]
    return f"fanned_out:{len(issued)}/{len(branches)}", publish


def _lock_set(
    s: Any, view: RunView, load: PolicyLoad, branches: list[Branch], version: int
) -> None:
    """The set's write begins: the run locked at ``version`` (else :class:`StaleVersion`) and
    the business effect keys its accepted calls share across runs (:func:`effects_still`)."""
    run = rows.lock_run(s, view.run_id)
    if run is None or run.version != version:
        raise StaleVersion(view.run_id)
    effects_still(s, view, load, [d for _, _, d in branches if isinstance(d, policy.Accept)])


def _refuse_set(
    ctx: StageContext,
    s: Any,
    view: RunView,
    proposal: dict[str, Any],
    fan: fan_in.FanOut,
    states: list[fan_in.BranchState],
    decided: fan_in.Verdict,
    events: list[tuple[str, dict[str, Any]]],
    now: float,
) -> Callable[[], None]:
    """The set's rule cannot hold with the calls the gate accepted: none runs (their
    commands are discarded); the planner sees the step's verdict (``invalid``)."""
    rows.cut_branches(s, fan.command_ids, at=to_datetime(now))
    content = fan_in.merged(fan, states, decided)
    rows.set_proposal(s, proposal["id"], status="rejected", rejection_code="PARALLEL_INVALID")
    new_version = commit(
        s,
        machine.replan(view, why=[*events, ("step.merged", content)]),
        step=fan.step,
        proposal_id=fan.proposal_id,
        observation=NewObservation(
            f"step-{fan.step}",
            ObservationKind.STEP_MERGED,
            ObservationSource.POLICY.value,
            content,
        ),
    )
    return partial(ctx.publisher.planner, view.run_id, new_version)
