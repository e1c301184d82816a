"""Recording a tool attempt's outcome: the one-statement fast path, the locked general path
(retries, cancellation, duplicates, an attempt no longer current), and what an outcome does to
its run."""

from __future__ import annotations

import dataclasses
import logging
import time
from functools import partial
from typing import Any

import sqlalchemy.exc
import tenacity
from sqlalchemy.orm import Session

from warrant.broker.context import StageContext
from warrant.broker.faults import crash_point
from warrant.broker.handoff_entry import enter_handoff
from warrant.broker.publish import Outbox, log_deferred
from warrant.broker.tool._call import Snapshot, ToolResult
from warrant.broker.tool.lease import record_late
from warrant.broker.tool.permission_waits import with_grant_wait
from warrant.broker.transitions import after_fact, reissue_command
from warrant.ledger import rows
from warrant.ledger.db import session_scope
from warrant.ledger.guarded import complete_command, insert_outcome
from warrant.ledger.models import Command, Observation, Run
from warrant.ledger.repo import (
    NewObservation,
    StaleVersion,
    append_events,
    charge_usage,
    command_for_update,
    commit,
    record_outcome,
    run_view,
    to_datetime,
)
from warrant.ledger.row_updates import finish_command
from warrant.ledger.stage_loads import artifacts_made_by, autocommit
from warrant.runner import fan_in
from warrant.runner import run_machine as machine
from warrant.runner.canonical import content_hash
from warrant.runner.codes import (
    BUDGET_STOPS,
    CommandStatus,
    ObservationKind,
    ObservationSource,
    Outcome,
    RunStatus,
    StopReason,
)
from warrant.runner.errors import BrokerUnavailable
from warrant.runner.fan_in import FanOut
from warrant.runner.handoff import artifacts_made
from warrant.runner.permission_wait import wait_for_grant
from warrant.runner.retry import decide_retry
from warrant.runner.run_machine import Change, charge_tool_usage
from warrant.runner.views import RunView
from warrant.tools._contract import SideEffect, Tool

__all__ = [
    "acceptance",
    "branch_reconciled",
    "conclude",
    "finish_branch",
    "outcome_values",
    "record",
    "trace",
]

log = logging.getLogger("warrant.tool")
#: How long an attempt keeps trying to record its outcome while the ledger is unreachable.
RECORD_PATIENCE_S = 120.0
LEDGER_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)
#: A branch that timed out this close to its step's branch deadline ended at that deadline.
DEADLINE_SLACK_S = 0.25


def _attempt_event(
    tool: Tool[Any, Any], res: ToolResult, attempt: int, duration_ms: float | None
) -> tuple[str, dict[str, Any]]:
    details = {
        "tool": tool.name,
        "status": res.status.value,
        "code": res.code,
        "attempt": attempt,
        "duration_ms": duration_ms,
    }
    if res.message and res.status is not Outcome.SUCCEEDED:
        details["message"] = res.message  # the tool's words, bounded and masked (tool_call)
    return "tool.completed", details


def outcome_values(snap: Snapshot, res: ToolResult, duration_ms: float | None) -> dict[str, Any]:
    """The ``outcomes`` row of the attempt ``snap`` with what it did, ``res``."""
    return {
        "command_id": snap.command_id,
        "run_id": snap.run_id,
        "status": res.status.value,
        "code": res.code,
        "retryable": res.retryable,
        "message": res.message,
        "output": res.output,
        "attempt": snap.attempt,
        "duration_ms": duration_ms,
    }


def _usage(tool: Tool[Any, Any], snap: Snapshot) -> dict[str, Any]:
    return {"tool": tool.name, "command_id": snap.command_id, "attempt": snap.attempt}


def trace(ctx: StageContext, row: Any, name: str, details: dict[str, Any]) -> None:
    """Trace one event of a delivery on ``row``'s run (a ``load_tool`` row), at its command's
    step and proposal."""
    with session_scope(ctx.engine) as s:
        append_events(
            s, row.id, [(name, details)], step=row.cmd_step, proposal_id=row.cmd_proposal_id
        )


def conclude(ctx: StageContext, snap: Snapshot, tool: Tool[Any, Any], res: ToolResult) -> str:
    """Record an attempt's outcome, a permission refusal in a run that asks turned into a wait
    for a grant first (``broker.tool.permission_waits``): in one statement when it can
    (:func:`record_fast`), else under row locks (:func:`record`). The outcome is known only to
    this process: a lost ledger connection must not lose it, so the record is tried again for
    :data:`RECORD_PATIENCE_S`. The stage's result (``rejected:<code>``, ``failed:<code>``...:
    what Flower shows, ``broker.tasks``)."""
    for attempt in tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(LEDGER_ERRORS),
        wait=tenacity.wait_exponential(multiplier=0.2, max=5),
        stop=tenacity.stop_after_delay(RECORD_PATIENCE_S),
        before_sleep=lambda state: log.warning(
            "recording the outcome of command %s failed (%s); retrying",
            snap.command_id,
            state.outcome.exception() if state.outcome else None,
        ),
        reraise=True,
    ):
        with attempt:
            res = with_grant_wait(ctx, snap, tool, res)
            done = None
            fast = not (res.status is Outcome.FAILED and res.retryable) and not res.handoff
            if fast and not snap.branch:  # a branch's outcome is merged under the run's lock
                done = record_fast(ctx, snap, tool, res)
            done = done or record(ctx, snap, tool, res)
            if done == Outcome.ACCEPTED.value and tool.job is not None:  # polled from now on
                _poll_jobs_later(ctx, snap.run_id, tool.job.interval_s)
            coded = res.code and done in ("rejected", "failed", "unknown", "retry_scheduled")
            return f"{done}:{res.code}" if coded else done
    raise AssertionError("unreachable: tenacity re-raises")


def _poll_jobs_later(ctx: StageContext, run_id: str, interval_s: float) -> None:
    """The job just accepted is polled ``interval_s`` from now (not at the next sweep)."""
    try:
        ctx.publisher.poll_jobs(run_id, countdown=interval_s)
    except BrokerUnavailable as exc:
        log_deferred(exc)  # the sweep polls it


def record_fast(
    ctx: StageContext, snap: Snapshot, tool: Tool[Any, Any], res: ToolResult
) -> str | None:
    """The common case in one statement: the run is where the message left it. None when the
    compare-and-set lost (a cancel, a duplicate delivery): :func:`record` sorts that out."""
    duration_ms = round((time.time() - snap.started_at) * 1000, 1)
    attempt_event = _attempt_event(tool, res, snap.attempt, duration_ms)
    # The claim saw the run running at snap.version: the compare-and-set commits only if it
    # still is (else the locked path sorts it out), so the change is made from there.
    at_claim = dataclasses.replace(snap.view, version=snap.version, status=RunStatus.RUNNING)
    made = _made(ctx.engine, snap.run_id) if res.stop in BUDGET_STOPS else []
    change, observation, go_on = _conclusion(
        at_claim, tool, res, snap.step, attempt_event, made=made
    )
    if res.usage:  # charged in the same compare-and-set as the outcome
        change = charge_tool_usage(
            change,
            at_claim,
            tokens=res.usage.tokens,
            cost=res.usage.cost,
            details=_usage(tool, snap),
        )
    command = {"status": CommandStatus.COMPLETED.value, "finished_at": to_datetime(ctx.clock())}
    try:
        with autocommit(ctx.engine) as conn:
            version = commit(
                conn,
                change,
                step=snap.step,
                proposal_id=snap.proposal_id,
                observation=observation,
                guarded=[
                    complete_command(snap.command_id, command),
                    insert_outcome(outcome_values(snap, res, duration_ms)),
                ],
                current_attempt=(snap.command_id, snap.attempt),
            )
    except StaleVersion:
        return None
    crash_point("tool:after_commit", snap.run_id)
    if go_on:
        ctx.publisher.planner(snap.run_id, version)
    return res.status.value


def record(ctx: StageContext, snap: Snapshot, tool: Tool[Any, Any], res: ToolResult) -> str:
    """The general case, under row locks: retries, cancellation, duplicates."""
    outbox = Outbox()
    with session_scope(ctx.engine) as s:
        cmd = command_for_update(s, snap.command_id)
        run = rows.lock_run(s, snap.run_id)
        assert cmd is not None and run is not None
        if res.usage:  # whatever becomes of the outcome (late, superseded): it was paid for
            charge_usage(
                s,
                snap.run_id,
                model_calls=0,
                tokens=res.usage.tokens,
                cost=res.usage.cost,
                step=snap.step,
                details=_usage(tool, snap),
                event="tool.usage.charged",
            )
        if cmd.status != CommandStatus.STARTED or cmd.attempts != snap.attempt:
            # Not (or no longer) this attempt's command to conclude.
            return record_late(ctx, s, run, cmd, tool, res, snap.attempt, outbox)
        duration_ms = None
        if cmd.started_at is not None:
            duration_ms = round((ctx.clock() - cmd.started_at.timestamp()) * 1000, 1)
        attempt_event = _attempt_event(tool, res, snap.attempt, duration_ms)
        if (
            res.status is Outcome.FAILED
            and res.retryable
            and run.status == RunStatus.RUNNING
            and _maybe_retry(ctx, s, run, cmd, tool, res, attempt_event, outbox)
        ):
            if tool.batch is not None:  # which items this attempt applied: the retry skips them
                record_outcome(s, **outcome_values(snap, res, duration_ms))
            result = "retry_scheduled"
        else:
            result = _finish(ctx, s, run, cmd, tool, res, attempt_event, duration_ms, snap, outbox)
    crash_point("tool:after_commit", snap.run_id)
    outbox.flush()
    return result


def _maybe_retry(
    ctx: StageContext,
    s: Any,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    res: ToolResult,
    attempt_event: tuple[str, dict[str, Any]],
    outbox: Outbox,
) -> bool:
    view = run_view(run)
    now = ctx.clock()
    deadline_at = view.deadline_at
    if cmd.branch and run.fan_out and run.fan_out.get("deadline_at"):  # a parallel step's
        deadline_at = min(deadline_at, float(run.fan_out["deadline_at"]))
    timeout = max(0.001, min(tool.timeout_s, deadline_at - now))
    decision = decide_retry(
        attempt=cmd.attempts,
        max_attempts=tool.max_attempts,
        tool_calls=view.tool_calls,
        max_tool_calls=view.budgets.max_tool_calls,
        now=now,
        deadline_at=deadline_at,
        attempt_timeout_s=timeout,
        base_s=tool.retry_base_s,
        cap_s=tool.retry_cap_s,
        retry_after_s=res.retry_after_s,
    )
    if not decision.retry:
        res.events.insert(
            0, ("tool.retry.refused", {"reason": decision.reason, "attempt": cmd.attempts})
        )
        return False
    attempt_timeout = max(0.001, min(tool.timeout_s, deadline_at - now - decision.delay_s))
    reissue_command(
        ctx,
        s,
        run,
        cmd,
        delay_s=decision.delay_s,
        timeout_s=attempt_timeout,
        scheduled={
            "attempt": cmd.attempts + 1,
            "delay_s": round(decision.delay_s, 3),
            "code": res.code,
            "retry_after": res.retry_after_s is not None,
        },
        events=[attempt_event],
        outbox=outbox,
    )
    return True


def _finish(
    ctx: StageContext,
    s: Any,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    res: ToolResult,
    attempt_event: tuple[str, dict[str, Any]],
    duration_ms: float | None,
    snap: Snapshot,
    outbox: Outbox,
) -> str:
    if not record_outcome(s, **outcome_values(snap, res, duration_ms)):
        return "superseded"  # lost the race for this attempt's outcome: no transition follows
    finish_command(cmd, stamp=True)
    if res.handoff:  # an effect nothing undid: a person looks (the bundle lists it)
        s.flush()
        reason = (res.stop or StopReason.TOOL_POSTCONDITION_FAILED).value
        events = [attempt_event, *res.events]
        enter_handoff(s, run, reason=reason, registry=ctx.registry, events=events)
        return res.status.value
    if cmd.branch:  # a parallel step's branch: the step's merge rule says what follows
        return finish_branch(ctx, s, run, cmd, tool, res, attempt_event, outbox)
    return _conclude_alone(ctx, s, run, cmd, tool, res, attempt_event, outbox)


def _conclude_alone(
    ctx: StageContext,
    s: Session,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    res: ToolResult,
    attempt_event: tuple[str, dict[str, Any]],
    outbox: Outbox,
) -> str:
    """The outcome of the one command the run waits on: the run's change, its observation,
    and the planner's message if the run goes on."""
    observation_id = fan_in.tool_observation_id(cmd.step, cmd.branch)
    made = _made(s, run.id) if res.stop in BUDGET_STOPS else []
    change, observation, go_on = _conclusion(
        run_view(run), tool, res, cmd.step, attempt_event, observation_id=observation_id, made=made
    )
    new_version = commit(
        s,
        change,
        step=cmd.step,
        proposal_id=cmd.proposal_id,
        observation=observation,
    )
    if go_on:
        run_id = run.id
        outbox.add(lambda: ctx.publisher.planner(run_id, new_version))
    return res.status.value


def finish_branch(
    ctx: StageContext,
    s: Session,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    res: ToolResult,
    attempt_event: tuple[str, dict[str, Any]],
    outbox: Outbox,
) -> str:
    """A parallel step's branch concluded (its outcome recorded; ``run`` and ``cmd`` locked,
    so the step's branches conclude one at a time). :func:`warrant.runner.fan_in.verdict`
    says whether the step's merge rule is decided: if not, the outcome is only recorded; if
    so, :func:`_merge`. An unknown effect is reconciled before the run moves on, as for any
    step (the other branches are cut). A branch concluding after its step was merged (a cut
    one, a late one) is a fact; in a cancelling run the last branch ends it."""
    view = run_view(run)
    events = [attempt_event, *res.events]
    fan = FanOut.from_json(run.fan_out) if run.fan_out else None
    if fan is None and run.active_command_id == cmd.id:  # retried after its reconciliation:
        return _conclude_alone(ctx, s, run, cmd, tool, res, attempt_event, outbox)  # waited on
    fact = partial(commit, s, step=cmd.step, proposal_id=cmd.proposal_id)
    running = view.status in (RunStatus.RUNNING, RunStatus.CANCELLING)
    waits = res.status is Outcome.ACCEPTED  # a sub-run's job: its poll settles the branch
    if fan is None or not fan.holds(cmd.step, cmd.id) or not running or waits:
        after_fact(ctx, run, fact(machine.record_only(view, events=events)), outbox)
        return res.status.value
    now = ctx.clock()
    states, outputs = _branch_states(ctx, s, run.id, fan, now)
    pending = [b.plan.command_id for b in states if b.status == fan_in.PENDING]
    if res.status is Outcome.UNKNOWN:  # reconciled first (a cancelling run stays so)
        call = fan.branch_of(cmd.id)
        assert call is not None
        fact(_reconcile_branch(ctx, view, call, code=res.code, events=events))
        reads = [  # a write in flight is never cut: its own outcome will be known
            b.plan.command_id
            for b in states
            if b.status == fan_in.PENDING and b.plan.command_id and not b.plan.write
        ]
        outbox.add(partial(_cut, ctx, reads, now))
        return res.status.value
    if view.status is RunStatus.CANCELLING:  # the last call in flight ends the run
        applied = any(b.status == fan_in.SUCCEEDED and _writes(ctx, b.plan.tool) for b in states)
        ended = machine.conclude_tool(
            view, tool=tool.name, succeeded=applied, write=applied, code=res.code,
            stop_reason=None, step=cmd.step, events=events,
        )  # fmt: skip
        fact(machine.record_only(view, events=events) if pending else ended)
        return res.status.value
    waiting = fan_in.unresolved(states)  # another call's unknown effect, recorded meanwhile
    if waiting is not None:
        fact(_reconcile_branch(ctx, view, waiting.plan, code=waiting.code, events=events))
        return res.status.value
    decided = fan_in.verdict(fan, states)
    if not decided.decided:
        fact(machine.record_only(view, events=events))
        return res.status.value
    _merge(ctx, s, run, fan, states, outputs, decided, events, outbox, now)
    return res.status.value


def _writes(ctx: StageContext, tool: str | None) -> bool:
    """Does a call of ``tool`` (any version this worker has) write?"""
    versions = ctx.registry.by_name(tool or "")
    return any(t.side_effect is not SideEffect.READ for t in versions)


def _reconcile_branch(
    ctx: StageContext,
    view: RunView,
    call: fan_in.BranchPlan,
    *,
    code: str | None,
    events: list[Any],
) -> Change:
    """A branch's effect is unknown: the run reconciles it (it is the run's active command
    now) before going on; the step's reads still in flight are cut, and the step stays open
    (:func:`branch_reconciled` merges it once the effect is known). The step's calls whose
    effects are unknown are reconciled one at a time, each in its turn."""
    tool = call.tool
    queried = any(t.reconcile is not None for t in ctx.registry.by_name(tool or ""))
    required = {"tool": tool, "branch": call.branch, "recovery": "query" if queried else "human"}
    change = machine.enter_reconciliation(
        view, required=required, detail={"tool": tool, "code": code}, events=events
    )
    reconciling = {**change.changes, "active_command_id": call.command_id}
    if view.status is RunStatus.CANCELLING:  # it ends once the effect is known, not merged
        reconciling["fan_out"] = None
    return dataclasses.replace(change, changes=reconciling)


def branch_reconciled(
    ctx: StageContext, s: Session, run: Run, cmd: Command, reconciled: Any, outbox: Outbox
) -> bool:
    """A parallel step's call whose unknown effect the reconciler found applied (its outcome
    resolved, the run ``reconciling``): the step's rule decides again, with the other calls'
    outcomes recorded meanwhile. Decided, the step merges and the planner goes on; else the
    run waits on a write of the step still in flight. ``False``: the run keeps no open step
    of this call (the caller concludes it alone)."""
    fan = FanOut.from_json(run.fan_out) if run.fan_out else None
    if fan is None or not fan.holds(cmd.step, cmd.id):
        return False
    s.flush()  # the resolved outcome, read back with the others
    now = ctx.clock()
    states, outputs = _branch_states(ctx, s, run.id, fan, now)
    waiting = fan_in.unresolved(states)
    if waiting is not None:  # the next one's turn
        change = _reconcile_branch(
            ctx, run_view(run), waiting.plan, code=waiting.code, events=[reconciled]
        )
        commit(s, change, step=cmd.step, proposal_id=cmd.proposal_id)
        return True
    decided = fan_in.verdict(fan, states)
    if decided.decided:
        _merge(ctx, s, run, fan, states, outputs, decided, [], outbox, now, reconciled=reconciled)
        return True
    pending = next(b.plan.command_id for b in states if b.status == fan_in.PENDING)
    change = machine.reconciled_applied(run_view(run), reconciled=reconciled, waits_on=pending)
    commit(s, change, step=cmd.step, proposal_id=cmd.proposal_id)
    return True


def _merge(
    ctx: StageContext,
    s: Session,
    run: Run,
    fan: FanOut,
    states: list[fan_in.BranchState],
    outputs: dict[int, Any],
    decided: fan_in.Verdict,
    events: list[Any],
    outbox: Outbox,
    now: float,
    *,
    reconciled: Any = None,
) -> None:
    """The step's rule is decided: the branches still in flight are cut (after the commit),
    each succeeded branch becomes an observation with its own source, the step's verdict
    another (``step.merged``), and the planner goes on."""
    view = run_view(run)
    states = [
        dataclasses.replace(b, status=fan_in.CANCELLED, cut=_cut_reason(decided))
        if b.status == fan_in.PENDING
        else b
        for b in states
    ]
    digests = {
        branch: content_hash(last.output)
        for branch, last in outputs.items()
        if last is not None and last.output is not None
    }
    content = fan_in.merged(fan, states, decided, digests=digests)
    _branch_observations(s, run, fan, states, outputs, decided, view.observation_version + 1)
    merged_observation = NewObservation(
        f"step-{fan.step}", ObservationKind.STEP_MERGED, ObservationSource.POLICY.value, content
    )
    change = (
        machine.merge_step(view, merged=content, events=events)
        if reconciled is None  # else the reconciler found a call's effect applied
        else machine.reconciled_applied(view, reconciled=reconciled, merged=content)
    )
    new_version = commit(
        s,
        change,
        step=fan.step,
        proposal_id=fan.proposal_id,
        observation=merged_observation,
    )
    run_id = run.id
    outbox.add(partial(_cut, ctx, list(decided.cut), now))
    outbox.add(lambda: ctx.publisher.planner(run_id, new_version))


def _cut(ctx: StageContext, command_ids: list[str], now: float) -> None:
    """Cut the branches still in flight once their step is merged, after its commit and in
    a transaction of its own (holding the run's lock, it would take the commands' locks in
    the other order than a claim): an issued one is discarded, a started one interrupted.
    A branch that starts or ends in between finds its step merged: its outcome is a fact."""
    if not command_ids:
        return
    with session_scope(ctx.engine) as s:
        started = rows.cut_branches(s, command_ids, at=to_datetime(now))
    ctx.publisher.revoke_commands(started)


def _cut_reason(decided: fan_in.Verdict) -> str:
    return "rule_cannot_hold" if decided.state == "invalid" else "rule_met"


def _branch_states(
    ctx: StageContext, s: Session, run_id: str, fan: FanOut, now: float
) -> tuple[list[fan_in.BranchState], dict[int, Any]]:
    """Each branch of the open step, from its command and last outcome (under the lock), and
    the last outcome of each branch (its output)."""
    found = {cmd.branch: (cmd, last) for cmd, last in rows.step_branches(s, run_id, fan.step)}
    at_deadline = fan.deadline_at is not None and now >= fan.deadline_at - DEADLINE_SLACK_S
    states = []
    for plan in fan.branches:
        cmd, last = found.get(plan.branch, (None, None))
        source = None
        if cmd is not None:
            t = ctx.registry.get(cmd.tool, cmd.tool_version)
            source = t.output_source.value if t is not None else None
        outcome = None if last is None else last.status
        command_status = None if cmd is None else cmd.status
        if outcome == Outcome.UNKNOWN.value and last is not None and last.resolved_status:
            outcome = Outcome.SUCCEEDED.value if last.resolved_status == "applied" else None
        if outcome == Outcome.ACCEPTED.value and last is not None:  # a job: open until settled
            outcome = last.resolved_status
            command_status = "started" if outcome is None else command_status
        states.append(
            fan_in.branch_state(
                plan,
                command_status=command_status,
                outcome=outcome,
                code=None if last is None else last.code,
                source=source,
                cut=cmd is not None and cmd.cut_at is not None,
                at_branch_deadline=at_deadline,
            )
        )
    return states, {branch: last for branch, (_, last) in found.items()}


def _branch_observations(
    s: Session,
    run: Run,
    fan: FanOut,
    states: list[fan_in.BranchState],
    outputs: dict[int, Any],
    decided: fan_in.Verdict,
    observation_version: int,
) -> None:
    """One observation per succeeded branch (``tool-<step>.<branch>``), with its tool's
    source. An ``invalid`` step's results are shown but not citable (``unmerged``)."""
    for b in states:
        if b.status != fan_in.SUCCEEDED:
            continue
        last = outputs.get(b.plan.branch)
        content: dict[str, Any] = {
            "tool": b.plan.tool,
            "status": "succeeded" if decided.state != "invalid" else "unmerged",
            "branch": b.plan.branch,
            "step_verdict": decided.state,
        }
        if last is not None and last.output is not None:
            content["output"] = last.output
        if last is not None and last.resolved_status == "applied":
            content["reconciled"] = True  # its reply was lost; the service says it was applied
        s.add(
            Observation(
                run_id=run.id,
                observation_id=fan_in.tool_observation_id(fan.step, b.plan.branch),
                kind=ObservationKind.TOOL_RESULT.value,
                source=b.source or ObservationSource.UNTRUSTED_CONTENT.value,
                step=fan.step,
                content=content,
                content_hash=content_hash(content),
                observation_version=observation_version,
            )
        )


def _made(where: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's artifacts, read only for a budget stop (the claim does not read them)."""
    if isinstance(where, Session):
        return artifacts_made(artifacts_made_by(where, run_id))
    with autocommit(where) as conn:
        return artifacts_made(artifacts_made_by(conn, run_id))


def _unknown(view: RunView, tool: Tool[Any, Any], res: ToolResult, events: list[Any]) -> Change:
    """The effect is unknown: the reconciler finds out (the run waits for it, unless it is
    past waiting: then the need is only traced)."""
    required = {
        "tool": tool.name,
        "trigger": res.trigger,
        "recovery": "query" if tool.reconcile is not None else "human",
    }
    if view.status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        detail = {"tool": tool.name, "code": res.code}
        return machine.enter_reconciliation(view, required=required, detail=detail, events=events)
    return machine.record_only(view, events=[*events, ("effect.reconciliation_required", required)])


def _conclusion(
    view: RunView,
    tool: Tool[Any, Any],
    res: ToolResult,
    step: int,
    attempt_event: tuple[str, dict[str, Any]],
    *,
    observation_id: str | None = None,
    made: list[dict[str, Any]] | None = None,
) -> tuple[Change, NewObservation | None, bool]:
    """What an outcome does to the run: the state machine's change, the observation the
    planner sees (``observation_id``, default ``tool-<step>``), and whether the planner goes
    on."""
    events = [attempt_event, *res.events]
    if res.grant_wait is not None and view.status is RunStatus.RUNNING:  # its tool asks
        return wait_for_grant(view, res.grant_wait, events=events), None, False
    if res.status is Outcome.UNKNOWN:
        return _unknown(view, tool, res, events), None, False
    if res.status is Outcome.ACCEPTED:
        return _accepted(view, tool, res, step, events)
    content: dict[str, Any] = {"tool": tool.name, "status": res.status.value}
    if res.output is not None:
        content["output"] = res.output
    if res.code:
        content["code"] = res.code
    if res.message and res.status is not Outcome.SUCCEEDED:
        content["message"] = res.message  # why: the planner sees the tool's own words
    observation = NewObservation(
        observation_id or f"tool-{step}",
        ObservationKind.TOOL_RESULT,
        tool.output_source.value,
        content,
    )
    change = machine.conclude_tool(
        view,
        tool=tool.name,
        succeeded=res.status is Outcome.SUCCEEDED,
        write=tool.side_effect is not SideEffect.READ,
        code=res.code,
        message=res.message if res.status is not Outcome.SUCCEEDED else None,
        stop_reason=res.stop,
        step=step,
        events=events,
        made=made or (),
    )
    go_on = view.status is RunStatus.RUNNING and res.stop is None
    return change, observation, go_on


def _accepted(
    view: RunView,
    tool: Tool[Any, Any],
    res: ToolResult,
    step: int,
    events: list[tuple[str, dict[str, Any]]],
) -> tuple[Change, NewObservation | None, bool]:
    """A long-running tool's job was accepted: the run waits (``broker.reconciler._job_polls``
    follows the job); the planner sees the acceptance, marked not final (a final answer cannot
    cite it)."""
    output = res.output or {}
    observation = acceptance(tool.name, tool.output_source.value, step, output)
    accepted = {"tool": tool.name, "operation_id": output.get("operation_id")}
    if view.status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        change = machine.await_job(view, accepted=accepted, events=events)
    else:
        change = machine.record_only(view, events=[*events, ("job.accepted", accepted)])
    return change, observation, False


def acceptance(tool: str, source: str, step: int, output: dict[str, Any]) -> NewObservation:
    """The observation ``tool-<step>`` of an accepted job: not final (a final answer cannot
    cite it); ``output`` holds its ``operation_id``."""
    content = {"tool": tool, "status": Outcome.ACCEPTED.value, "final": False, **output}
    return NewObservation(f"tool-{step}", ObservationKind.TOOL_RESULT, source, content)
