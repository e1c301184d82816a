"""The reconciler's second category: unknown effects, resolved by asking the tool.

For each due ``unknown`` outcome the tool's ``reconcile(idempotency_token)`` is asked
(outside any lock), then the answer is applied under row locks:

- ``applied`` → the real outcome and observation are recorded, the run goes on (or finishes
  its cancellation);
- ``not_applied`` → retried with the *same* command and token if budget and deadline allow,
  else the run fails (a cancelling run ends ``cancelled``). Never while the attempt that was
  declared lost could still be running: then it is asked again once its hard limit passed;
- still unknown → counted, backed off; no ``reconcile``, or too many tries → handoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from warrant.broker.context import StageContext
from warrant.broker.handoff_entry import enter_handoff
from warrant.broker.publish import Outbox
from warrant.broker.tool.record import acceptance, branch_reconciled
from warrant.broker.transitions import HARD_LIMIT_GRACE_S, reissue_command
from warrant.ledger import rows, sweeps
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, OutcomeRow, Run
from warrant.ledger.repo import NewObservation, append_events, commit, run_view, to_datetime
from warrant.ledger.row_updates import (
    count_reconciliation,
    finish_command,
    merge_outcome_output,
    outcome_became_job,
    resolve_outcome,
    schedule_reconciliation,
)
from warrant.runner import run_machine as machine
from warrant.runner.codes import ObservationKind, RunStatus, StopReason
from warrant.runner.fan_in import tool_observation_id
from warrant.runner.run_machine import Stop
from warrant.runner.settings import WarrantSettings
from warrant.runner.tool_outcomes import (
    Answer,
    Next,
    after_not_applied,
    ask_again_in,
    batch_answer,
    item_status,
    late_effect_to_a_person,
    may_still_be_applying,
    next_step,
)
from warrant.tools import _batches as batches
from warrant.tools._contract import ReconcileResult, Tool, ToolContext

__all__ = ["each_due", "reconcile_unknown_effects", "tool_context", "unresolved"]

log = logging.getLogger("warrant.reconciler")


def reconcile_unknown_effects(
    ctx: StageContext, settings: WarrantSettings, report: Any, check: Callable[[], None]
) -> None:
    """Each due unknown outcome once; ``check`` is called before each (it raises to stop)."""
    with session_scope(ctx.engine) as s:
        due = sweeps.due_unknown_outcomes(s, limit=settings.sweep_batch)
    one = partial(_reconcile_one, ctx, settings, report)
    each_due(due, one, check, doing="reconciling outcome")


def each_due(
    due: list[int], one: Callable[[int], None], check: Callable[[], None], *, doing: str
) -> None:
    """``one`` for each due outcome, ``check`` called before each (it raises to stop); one
    that fails is logged (``doing`` names what failed) and tried again next sweep."""
    for outcome_id in due:
        check()
        try:
            one(outcome_id)
        except Exception:
            log.exception("%s %s failed; will retry next sweep", doing, outcome_id)


def unresolved(
    ctx: StageContext, s: Any, outcome_id: int
) -> tuple[OutcomeRow, Run, Command, Tool[Any, Any] | None] | None:
    """The outcome (None once resolved), its run, its command and the command's tool (None:
    not a version this worker has), read without locks."""
    outcome = rows.outcome(s, outcome_id)
    if outcome is None or outcome.resolved_status is not None:
        return None
    cmd, run = rows.command(s, outcome.command_id), rows.run(s, outcome.run_id)
    assert cmd is not None and run is not None
    return outcome, run, cmd, ctx.registry.get(cmd.tool, cmd.tool_version)


def tool_context(
    ctx: StageContext, run: Run, cmd: Command, tool: Tool[Any, Any], **more: Any
) -> ToolContext:
    """What the tool is told of the command it is asked about (``more``: the context's other
    fields)."""
    return ToolContext(
        run_id=run.id,
        command_id=cmd.id,
        subject=run.subject,
        idempotency_token=cmd.idempotency_token,
        attempt=cmd.attempts,
        deadline_at=run.deadline_at.timestamp(),
        deps=ctx.deps_for(tool),
        **more,
    )


@dataclass(frozen=True)
class _Answer:
    result: Answer
    found: ReconcileResult | None = None
    error: str | None = None


def _ask(ctx: StageContext, outcome_id: int) -> tuple[Tool[Any, Any] | None, _Answer] | None:
    """The tool's answer about the outcome's effect, asked outside any lock."""
    with session_scope(ctx.engine) as s:
        loaded = unresolved(ctx, s, outcome_id)
        if loaded is None:
            return None
        _, run, cmd, tool = loaded
        if tool is None or tool.reconcile is None:
            return tool, _Answer(Answer.UNSUPPORTED)
        context = tool_context(ctx, run, cmd, tool)
        token = cmd.idempotency_token
        if tool.batch is not None:
            reports = [o.output for o in rows.command_outcomes(s, cmd.id)]
            arguments = dict(cmd.arguments or {})
    if tool.batch is not None:
        return tool, _ask_items(tool, arguments, reports, context)
    try:
        found = tool.reconcile(token, context)
    except Exception as exc:  # the status query itself failed: still unknown
        return tool, _Answer(Answer.ERROR, error=type(exc).__name__)
    if found is None or found.applied is None:
        return tool, _Answer(Answer.UNKNOWN, found)
    return tool, _Answer(Answer.APPLIED if found.applied else Answer.NOT_APPLIED, found)


def _ask_items(
    tool: Tool[Any, Any], arguments: dict[str, Any], reports: list[Any], context: ToolContext
) -> _Answer:
    """A batch tool's unknown outcome: each item not known applied is asked about by its own
    token; all applied → applied, any still unknown → unknown, else not applied (the retry is
    given only the items not applied: the ones found applied are recorded with the answer)."""
    assert tool.batch is not None and tool.reconcile is not None
    applied = batches.applied_keys(reports)
    now: list[dict[str, Any]] = []
    for key in batches.keys_of(tool.batch, arguments):
        if key in applied:
            continue
        try:
            found = tool.reconcile(context.item_token(key), context)
        except Exception as exc:
            return _Answer(Answer.ERROR, error=type(exc).__name__)
        status = item_status(found.applied)
        now.append({"key": key, "status": status, "output": found.output, "retryable": True})
    items = batches.merged(tool.batch, arguments, reports, now)
    answer = batch_answer(batches.verdict(items).outcome)
    return _Answer(answer, ReconcileResult(answer == Answer.APPLIED, {"items": items}))


@dataclass
class _Apply:
    """One answer being applied, under the locks of its outcome, run and command."""

    ctx: StageContext
    s: Any
    outcome: OutcomeRow
    run: Run
    cmd: Command
    tool: Tool[Any, Any] | None
    event: tuple[str, dict[str, Any]]
    outbox: Outbox

    def resolve(self, status: str) -> None:
        resolve_outcome(self.outcome, status)

    @property
    def cancelling(self) -> bool:
        return self.run.status == RunStatus.CANCELLING

    @property
    def in_flight(self) -> bool:
        """The run still waits on this effect (reconciling, or cancelling until it is known):
        it is the run's active command (a parallel step's other calls are facts to record)."""
        waiting = self.run.status in (RunStatus.RECONCILING, RunStatus.CANCELLING)
        return waiting and self.run.active_command_id == self.cmd.id


def _after_the_run_moved_on(a: _Apply, result: Answer) -> None:
    """The run no longer waits on this effect (a person has it, or it ended): the answer is
    recorded; an effect found applied after the run ended goes to a person."""
    a.resolve(result)
    if late_effect_to_a_person(result, run_ended=RunStatus(a.run.status).terminal):
        _to_a_person(a)
    else:
        append_events(a.s, a.run.id, [a.event], step=a.cmd.step, proposal_id=a.cmd.proposal_id)


def _to_a_person(a: _Apply) -> None:
    """A handoff for this effect, unless a person already has the run."""
    if a.run.status == RunStatus.HANDOFF:
        append_events(a.s, a.run.id, [a.event], step=a.cmd.step, proposal_id=a.cmd.proposal_id)
        return
    a.s.flush()
    enter_handoff(
        a.s,
        a.run,
        reason=StopReason.UNKNOWN_EFFECT.value,
        registry=a.ctx.registry,
        events=[a.event],
        late_effect=RunStatus(a.run.status).terminal,
    )


def _reconcile_one(
    ctx: StageContext, settings: WarrantSettings, report: Any, outcome_id: int
) -> None:
    asked = _ask(ctx, outcome_id)
    if asked is None:
        return
    tool, answer = asked
    outbox = Outbox()
    with session_scope(ctx.engine) as s:
        locked = sweeps.lock_unresolved(s, outcome_id)
        if locked is None:
            return
        outcome, run, cmd = locked
        if _waits_its_turn(run, cmd):  # the run reconciles another call of its step first
            schedule_reconciliation(outcome, to_datetime(ctx.clock() + TURN_WAIT_S))
            report.still_unknown += 1
            return
        waits = settings.lease_heartbeat_timeout_s
        if answer.result == Answer.NOT_APPLIED and _defer(
            s, run, cmd, outcome, heartbeat_timeout_s=waits
        ):
            report.still_unknown += 1
            return
        if tool is not None and tool.batch is not None and answer.found is not None:
            merge_outcome_output(outcome, answer.found.output or {})
        detail = {"error": answer.error} if answer.error else None
        attempt = count_reconciliation(
            s, outcome, run_id=run.id, command_id=cmd.id, result=answer.result, detail=detail
        )
        event = (
            "effect.reconciled",
            {"tool": cmd.tool, "result": answer.result, "attempt": attempt},
        )
        step = _Apply(ctx, s, outcome, run, cmd, tool, event, outbox)
        action = next_step(
            answer.result,
            run_waits=step.in_flight,
            tries=attempt,
            max_tries=settings.max_reconcile_attempts,
        )
        if action == Next.RECORD:
            _after_the_run_moved_on(step, answer.result)
        elif action == Next.APPLY:
            _applied(step, answer.found)
            report.applied += 1
        elif action == Next.RETRY_OR_STOP:
            counter = _not_applied(step)
            setattr(report, counter, getattr(report, counter) + 1)
        elif action == Next.TO_A_PERSON:
            step.resolve("handoff")
            _to_a_person(step)
            report.handed_off += 1
        else:
            schedule_reconciliation(outcome, to_datetime(ctx.clock() + ask_again_in(attempt)))
            append_events(s, run.id, [event], step=cmd.step, proposal_id=cmd.proposal_id)
            report.still_unknown += 1
    outbox.flush()


#: How soon a parallel step's call whose effect waits its turn is looked at again.
TURN_WAIT_S = 2.0


def _waits_its_turn(run: Run, cmd: Command) -> bool:
    """A parallel step's call whose effect is unknown while the run, still on that step,
    reconciles (or retries) another of its calls: it is reconciled in its turn, as the run's
    active command (``broker.tool.record.finish_branch`` hands it over), so that a call
    found not applied is retried like any other."""
    fan = run.fan_out or {}
    return bool(
        cmd.branch
        and fan.get("step") == cmd.step
        and run.active_command_id != cmd.id
        and run.status in (RunStatus.RUNNING, RunStatus.RECONCILING)
    )


def _defer(
    s: Any, run: Run, cmd: Command, outcome: OutcomeRow, *, heartbeat_timeout_s: float
) -> bool:
    """ "Not applied" is only true once no attempt can still be applying it: for an outcome
    recorded on behalf of an attempt that may still run, ask again after its hard limit."""
    if not may_still_be_applying(
        code=outcome.code, attempts=cmd.attempts, outcome_attempt=outcome.attempt
    ):
        return False
    until = sweeps.attempt_may_run(
        s,
        cmd,
        limit_s=cmd.timeout_s + HARD_LIMIT_GRACE_S,
        heartbeat_timeout_s=heartbeat_timeout_s,
    )
    if until is None:
        return False
    schedule_reconciliation(outcome, until)
    append_events(
        s,
        run.id,
        [("effect.reconcile_deferred", {"tool": cmd.tool, "reason": "attempt-may-run"})],
        step=cmd.step,
        proposal_id=cmd.proposal_id,
    )
    return True


def _applied(a: _Apply, found: ReconcileResult | None) -> None:
    operation_id = ((found.output if found else None) or {}).get("operation_id")
    if a.tool is not None and a.tool.job is not None and operation_id:
        _job_found(a, str(operation_id))
        return
    a.resolve("applied")
    finish_command(a.cmd)
    merged = a.cmd.branch and not a.cancelling  # a parallel step's call: its step's rule decides
    if merged and branch_reconciled(a.ctx, a.s, a.run, a.cmd, a.event, a.outbox):
        return
    observation = NewObservation(
        tool_observation_id(a.cmd.step, a.cmd.branch),
        ObservationKind.TOOL_RESULT,
        a.tool.output_source.value if a.tool else "trusted-tool",
        {
            "tool": a.cmd.tool,
            "status": "succeeded",
            "output": (found.output if found else None) or {},
            "reconciled": True,
        },
    )
    if a.cancelling:
        change = machine.finish_cancel(
            run_view(a.run), effect="applied", step=a.cmd.step, events=[a.event]
        )
        commit(a.s, change, step=a.cmd.step, observation=observation)
        return
    change = machine.reconciled_applied(run_view(a.run), reconciled=a.event)
    version = commit(
        a.s, change, step=a.cmd.step, proposal_id=a.cmd.proposal_id, observation=observation
    )
    a.outbox.add(partial(a.ctx.publisher.planner, a.run.id, version))


def _job_found(a: _Apply, operation_id: str) -> None:
    """A long-running tool's call whose answer was lost: the service has its job. The outcome
    becomes the job's acceptance and the run waits for it (``broker.reconciler._job_polls``)."""
    outcome_became_job(a.outcome, operation_id)
    finish_command(a.cmd)
    source = a.tool.output_source.value if a.tool else "trusted-tool"
    observation = acceptance(a.cmd.tool, source, a.cmd.step, {"operation_id": operation_id})
    accepted = {"tool": a.cmd.tool, "operation_id": operation_id, "found": "reconciliation"}
    change = machine.await_job(run_view(a.run), accepted=accepted, events=[a.event])
    commit(a.s, change, step=a.cmd.step, proposal_id=a.cmd.proposal_id, observation=observation)
    if a.tool is not None and a.tool.job is not None:
        interval = a.tool.job.interval_s
        a.outbox.add(partial(a.ctx.publisher.poll_jobs, a.run.id, countdown=interval))


def _not_applied(a: _Apply) -> str:
    """Known not applied: end a cancellation, retry the same command with the same token if
    budget and deadline allow, else fail the run. Returns the report counter to count in."""
    a.resolve("not_applied")
    view = run_view(a.run)
    assert a.tool is not None
    timeout = min(a.tool.timeout_s, view.deadline_at - a.ctx.clock())
    if a.cancelling:
        finish_command(a.cmd)
        change = machine.finish_cancel(view, effect="none", step=a.cmd.step, events=[a.event])
        commit(a.s, change, step=a.cmd.step)
        return "not_applied"
    stops = after_not_applied(
        code=a.outcome.code,
        attempts=a.cmd.attempts,
        max_attempts=a.tool.max_attempts,
        calls_left=view.tool_calls < view.budgets.max_tool_calls,
        time_left_s=timeout,
    )
    if stops is None:
        reissue_command(
            a.ctx,
            a.s,
            a.run,
            a.cmd,
            delay_s=0.0,
            timeout_s=timeout,
            scheduled={
                "attempt": a.cmd.attempts + 1,
                "delay_s": 0,
                "code": a.outcome.code,
                "after": "reconciliation",
            },
            events=[a.event],
            outbox=a.outbox,
        )
        return "retried"
    finish_command(a.cmd)
    stop = Stop(RunStatus.FAILED, stops[0], {"tool": a.cmd.tool, "code": stops[1]})
    commit(a.s, machine.stop(view, stop, step=a.cmd.step, events=[a.event]), step=a.cmd.step)
    return "not_applied"
