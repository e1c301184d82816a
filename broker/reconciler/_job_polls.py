"""The reconciler's sixth category: accepted jobs of long-running tools, followed to their end.

For each due ``accepted`` outcome (``JobHooks``) the tool's ``poll(operation_id)``
is asked outside any lock, then the answer is applied under the locks of the outcome, its run
and its command:

- ``succeeded`` → the output is checked against the tool's output model and recorded as the
  final observation ``job-<step>``; a waiting run goes back to its planner, a cancelling one
  ends ``cancelled`` with ``effect: applied``;
- ``failed`` → the same with the job's code: the planner sees it (``effect: none`` for a
  cancelling run);
- ``running`` (or the poll failed) → counted, asked again in ``interval_s``.

A cancel of the run, or a job past its bounds (``max_polls``, ``timeout_s`` after acceptance,
the run's deadline) calls the contract's ``cancel`` once: the request is committed before the
call, so no crash makes it twice. The job is then asked :data:`POLLS_AFTER_CANCEL` more times; one
that still does not say how it ended (or has no ``cancel``) goes to a person, its operation id
in the bundle. Every poll is a row of ``reconciliations`` (its history).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import ValidationError

from warrant.broker.context import StageContext
from warrant.broker.handoff_entry import enter_handoff
from warrant.broker.publish import Outbox
from warrant.broker.reconciler._effects import each_due, tool_context, unresolved
from warrant.broker.tool.record import finish_branch
from warrant.ledger import sweeps
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, OutcomeRow, Reconciliation, Run
from warrant.ledger.repo import NewObservation, append_events, commit, run_view, to_datetime
from warrant.ledger.row_updates import (
    count_reconciliation,
    resolve_outcome,
    schedule_reconciliation,
    settle_branch_job,
)
from warrant.runner import run_machine as machine
from warrant.runner.codes import ObservationKind, Outcome, RunStatus, StopReason
from warrant.runner.fan_in import FanOut
from warrant.runner.settings import WarrantSettings
from warrant.runner.tool_outcomes import ToolResult
from warrant.tools._contract import JobState, JobStatus, Tool, ToolContext

__all__ = ["POLLS_AFTER_CANCEL", "poll_waiting_jobs"]

log = logging.getLogger("warrant.reconciler")

#: Polls of a job after its cancel was requested (or it ran out of bounds) before a person
#: is asked to find out how it ended.
POLLS_AFTER_CANCEL = 3
CANCEL_REQUESTED = "cancel_requested"


def poll_waiting_jobs(
    ctx: StageContext, settings: WarrantSettings, report: Any, check: Callable[[], None]
) -> None:
    """Each due accepted job once; ``check`` is called before each (it raises to stop)."""
    with session_scope(ctx.engine) as s:
        due = sweeps.due_accepted_outcomes(s, limit=settings.sweep_batch)
    each_due(due, partial(_follow, ctx, report), check, doing="polling the job of outcome")


@dataclass(frozen=True)
class _Job:
    tool: Tool[Any, Any] | None
    operation_id: str
    context: ToolContext | None
    overdue: bool
    cancel_asked_at: int | None
    """The poll count when the cancel was requested (None: not yet)."""
    wants_cancel: bool


def _follow(ctx: StageContext, report: Any, outcome_id: int) -> None:
    job = _load(ctx, outcome_id)
    if job is None:
        return
    hooks = job.tool.job if job.tool is not None else None
    if hooks is None or job.context is None:
        _apply(ctx, report, outcome_id, job, None)  # nobody here can follow it: a person
        return
    if job.wants_cancel and job.cancel_asked_at is None and hooks.cancel is not None:
        if not _request_cancel(ctx, outcome_id):
            return
        try:
            hooks.cancel(job.operation_id, job.context)
        except Exception:
            log.exception("cancelling job %s failed (it is polled on)", job.operation_id)
        job = _load(ctx, outcome_id)
        if job is None:
            return
    try:
        status: JobStatus | None = hooks.poll(job.operation_id, job.context)
    except Exception as exc:
        log.warning("polling job %s failed: %s", job.operation_id, type(exc).__name__)
        status = None
    _apply(ctx, report, outcome_id, job, status)


def _load(ctx: StageContext, outcome_id: int) -> _Job | None:
    with session_scope(ctx.engine) as s:
        loaded = unresolved(ctx, s, outcome_id)
        if loaded is None:
            return None
        outcome, run, cmd, tool = loaded
        operation_id = str((outcome.output or {}).get("operation_id", ""))
        asked = sweeps.job_cancel_asked_at(s, cmd.id)
        if tool is None or tool.job is None:
            return _Job(tool, operation_id, None, True, asked, True)
        now, hooks = ctx.clock(), tool.job
        step_open, step_ends = _branch_step(run, cmd)
        overdue = (
            outcome.reconcile_attempts >= hooks.max_polls
            or now >= outcome.created_at.timestamp() + hooks.timeout_s
            or now >= run.deadline_at.timestamp()
            or (step_ends is not None and now >= step_ends)
        )
        context = tool_context(ctx, run, cmd, tool, clock=ctx.clock)
        # a parallel step's call whose step was merged meanwhile was cut: its job is cancelled
        wants = overdue or run.status == RunStatus.CANCELLING or not step_open
        return _Job(tool, operation_id, context, overdue or not step_open, asked, wants)


def _branch_step(run: Run, cmd: Command) -> tuple[bool, float | None]:
    """For a parallel step's call: whether its step is still open, and its branch deadline
    (epoch seconds; ``None``: none). A call of no step: open, no deadline of its own."""
    if not cmd.branch:
        return True, None
    fan = FanOut.from_json(run.fan_out) if run.fan_out else None
    if fan is None or not fan.holds(cmd.step, cmd.id):
        return False, None
    return True, fan.deadline_at


def _request_cancel(ctx: StageContext, outcome_id: int) -> bool:
    """Commit the cancel request before it is sent (at most once, whatever crashes)."""
    with session_scope(ctx.engine) as s:
        locked = sweeps.lock_unresolved(s, outcome_id)
        if locked is None or sweeps.job_cancel_asked_at(s, locked[2].id) is not None:
            return False
        outcome, run, cmd = locked
        s.add(
            Reconciliation(
                run_id=run.id,
                command_id=cmd.id,
                attempt=outcome.reconcile_attempts,
                result=CANCEL_REQUESTED,
            )
        )
        asked = ("job.cancel_requested", {"tool": cmd.tool, "polls": outcome.reconcile_attempts})
        append_events(s, run.id, [asked], step=cmd.step, proposal_id=cmd.proposal_id)
    return True


@dataclass
class _Settle:
    ctx: StageContext
    s: Any
    outcome: OutcomeRow
    run: Run
    cmd: Command
    tool: Tool[Any, Any] | None
    outbox: Outbox

    def polled(self, result: str) -> tuple[str, dict[str, Any]]:
        attempt = count_reconciliation(
            self.s, self.outcome, run_id=self.run.id, command_id=self.cmd.id, result=result
        )
        return ("job.polled", {"tool": self.cmd.tool, "state": result, "polls": attempt})


def _apply(
    ctx: StageContext, report: Any, outcome_id: int, job: _Job, status: JobStatus | None
) -> None:
    outbox = Outbox()
    with session_scope(ctx.engine) as s:
        locked = sweeps.lock_unresolved(s, outcome_id)
        if locked is None:
            return
        outcome, run, cmd = locked
        a = _Settle(ctx, s, outcome, run, cmd, job.tool, outbox)
        state = status.state if status is not None else "error"
        polled = a.polled(state)
        if status is not None and status.state is not JobState.RUNNING:
            _settled(a, status, polled)
            report.jobs_settled += 1
        elif _given_up(a, job):
            resolve_outcome(outcome, "handoff")
            s.flush()
            enter_handoff(
                s,
                run,
                reason=StopReason.UNKNOWN_EFFECT.value,
                registry=ctx.registry,
                events=[polled, ("job.unsettled", {"tool": cmd.tool, "code": _why(job)})],
            )
            report.handed_off += 1
        else:
            interval = job.tool.job.interval_s if job.tool and job.tool.job else 5.0
            schedule_reconciliation(outcome, to_datetime(ctx.clock() + interval))
            append_events(s, run.id, [polled], step=cmd.step, proposal_id=cmd.proposal_id)
            outbox.add(partial(ctx.publisher.poll_jobs, run.id, countdown=interval))
            report.jobs_waiting += 1
    outbox.flush()


def _given_up(a: _Settle, job: _Job) -> bool:
    """No one can follow the job any more: no hooks here, past its bounds with no cancel to
    ask for, or asked :data:`POLLS_AFTER_CANCEL` times since its cancel was requested."""
    hooks = job.tool.job if job.tool is not None else None
    if hooks is None:
        return True
    if not job.wants_cancel:
        return False
    if job.cancel_asked_at is None:
        return job.overdue and hooks.cancel is None
    return job.overdue and a.outcome.reconcile_attempts - job.cancel_asked_at >= POLLS_AFTER_CANCEL


def _why(job: _Job) -> str:
    if job.tool is None or job.tool.job is None:
        return "JOB_HOOKS_MISSING"
    return "JOB_DID_NOT_SETTLE"


def _settled(a: _Settle, status: JobStatus, polled: tuple[str, dict[str, Any]]) -> None:
    """The job ended: its final observation, and the run goes on (or ends its cancel). A
    parallel step's call (a sub-run) concludes its branch instead: the step's rule decides."""
    succeeded, content = _final_content(a, status)
    if a.cmd.branch and a.tool is not None:
        ended = "succeeded" if succeeded else "failed"
        settle_branch_job(a.outcome, ended, output=content.get("output"), code=content.get("code"))
        settled = {"tool": a.cmd.tool, "status": content["status"], "code": content.get("code")}
        res = ToolResult(
            status=Outcome.SUCCEEDED if succeeded else Outcome.FAILED,
            code=content.get("code"),
            events=[("job.settled", settled)],
        )
        finish_branch(a.ctx, a.s, a.run, a.cmd, a.tool, res, polled, a.outbox)
        return
    resolve_outcome(a.outcome, "succeeded" if succeeded else "failed")
    source = a.tool.output_source.value if a.tool else "trusted-tool"
    observation = NewObservation(f"job-{a.cmd.step}", ObservationKind.TOOL_RESULT, source, content)
    settled = {"tool": a.cmd.tool, "status": content["status"], "code": content.get("code")}
    view = run_view(a.run)
    if view.status is RunStatus.CANCELLING:
        effect = "applied" if succeeded else "none"
        change = machine.finish_cancel(view, effect=effect, step=a.cmd.step, events=[polled])
        commit(a.s, change, step=a.cmd.step, observation=observation)
        return
    if view.status is not RunStatus.WAITING_JOB:
        append_events(a.s, a.run.id, [polled, ("job.settled", settled)], step=a.cmd.step)
        return
    change = machine.job_settled(view, settled=settled, events=[polled])
    version = commit(
        a.s, change, step=a.cmd.step, proposal_id=a.cmd.proposal_id, observation=observation
    )
    a.outbox.add(partial(a.ctx.publisher.planner, a.run.id, version))


def _final_content(a: _Settle, status: JobStatus) -> tuple[bool, dict[str, Any]]:
    operation_id = (a.outcome.output or {}).get("operation_id")
    base = {"tool": a.cmd.tool, "operation_id": operation_id, "final": True}
    if status.state is JobState.SUCCEEDED:
        try:
            model = a.tool.output_model if a.tool else None
            checked = model.model_validate(status.output or {}) if model else None
            output = checked.model_dump(mode="json") if checked is not None else {}
        except ValidationError:
            return False, {**base, "status": "failed", "code": "TOOL_OUTPUT_INVALID"}
        return True, {**base, "status": "succeeded", "output": output}
    content = {**base, "status": "failed", "code": status.code or "JOB_FAILED"}
    if status.message:
        arguments = a.cmd.arguments or {}
        content["message"] = a.tool.outcome_message(status.message, arguments) if a.tool else ""
    return False, content
