"""The run's state machine: every allowed status change, declared once.

``RULES`` maps each :class:`RunEvent` to the statuses it may leave from and go to and the
trace event it records; :func:`make_change` refuses anything else. The named functions below
(stop, cancel, resume after confirmation, conclude a tool outcome, apply a reconcile result,
hand off, resolve, ...) are the only producers of a :class:`Change`: the column changes and
trace events of one compare-and-set. Stages and the client load a
:class:`~warrant.runner.views.RunView`, call one of them, and commit the change with
:func:`warrant.ledger.repo.commit` (which raises the version by one).

Nothing here touches a database or a broker. Two markers stand for values only the ledger
knows: :data:`NOW` (the database's clock) and :data:`NEXT_PROPOSAL_ID` (the id of the
proposal row written in the same statement).

Invariants (checked by ``tests/unit/test_run_machine.py`` on random event sequences): a
terminal status changes only by :func:`reopen_for_late_effect` (an effect found after the run
ended is handed to a person: the ledger must not keep saying it did not happen); every status
change records ``state.transitioned``; every stop records ``run.stopped`` with a reason from
:class:`~warrant.runner.codes.StopReason`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from warrant.runner.codes import BUDGET_STOPS, ErrorCode, Phase, RunStatus, StopReason
from warrant.runner.errors import StateConflict
from warrant.runner.views import RunView

S = RunStatus

__all__ = [
    "NEXT_PROPOSAL_ID",
    "NOW",
    "RULES",
    "Change",
    "IllegalTransition",
    "Rule",
    "RunEvent",
    "Start",
    "Stop",
    "answer",
    "cancel",
    "charge_tool_usage",
    "conclude_tool",
    "enter_reconciliation",
    "fan_out",
    "finish_cancel",
    "forward_proposal",
    "hand_off",
    "issue_command",
    "make_change",
    "merge_step",
    "reconciled_applied",
    "record_only",
    "reissue_command",
    "reopen_for_late_effect",
    "replan",
    "request_confirmation",
    "request_grant",
    "resolve",
    "resume_after_confirmation",
    "resume_after_grant",
    "snapshot_after",
    "start",
    "stop",
    "stop_changes",
    "stop_events",
    "transitioned",
]


# --- the declarations: every allowed status change, once ----------------------------------

Event = tuple[str, dict[str, Any]]


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOW: Final = _Marker("NOW")
"""A column value: the database's ``now()`` at commit."""
NEXT_PROPOSAL_ID: Final = _Marker("NEXT_PROPOSAL_ID")
"""A ``pending_proposal_id`` value: the id of the proposal row inserted by the same commit."""


class IllegalTransition(StateConflict):
    """A change the state machine does not declare (a bug in a stage, never bad input)."""

    code: str = ErrorCode.ILLEGAL_TRANSITION


@dataclass(frozen=True)
class Stop:
    """Why and how a run stops (or waits for a person)."""

    status: RunStatus
    reason: StopReason
    detail: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None

    def with_artifacts(self, made: Sequence[dict[str, Any]]) -> Stop:
        """A budget stop lists the artifacts already made; any other stop is itself."""
        if self.reason not in BUDGET_STOPS:
            return self
        return dataclasses.replace(self, detail={**self.detail, "artifacts": list(made)})


class RunEvent(StrEnum):
    FORWARD_PROPOSAL = "forward_proposal"
    REPLAN = "replan"
    ISSUE_COMMAND = "issue_command"
    REISSUE_COMMAND = "reissue_command"
    REQUEST_CONFIRMATION = "request_confirmation"
    RESUME_AFTER_CONFIRMATION = "resume_after_confirmation"
    REQUEST_GRANT = "request_grant"
    RESUME_AFTER_GRANT = "resume_after_grant"
    CONCLUDE_TOOL = "conclude_tool"
    ENTER_RECONCILIATION = "enter_reconciliation"
    RECONCILED_APPLIED = "reconciled_applied"
    AWAIT_JOB = "await_job"
    JOB_SETTLED = "job_settled"
    STOP = "stop"
    CANCEL = "cancel"
    FINISH_CANCEL = "finish_cancel"
    HAND_OFF = "hand_off"
    RESOLVE = "resolve"
    REOPEN_FOR_LATE_EFFECT = "reopen_for_late_effect"
    ANSWER = "answer"
    RECORD = "record"
    """Facts about a run whose status they no longer change (an outcome arriving after a
    cancel or a handoff): recorded with a version bump, the status stays."""


@dataclass(frozen=True)
class Rule:
    sources: frozenset[RunStatus]
    targets: frozenset[RunStatus]
    trace: frozenset[str]
    """The change records one of these trace events (and ``state.transitioned`` when the status
    changes)."""


_ALL = frozenset(RunStatus)
_ACTIVE = frozenset(
    {S.RUNNING, S.WAITING_CONFIRMATION, S.WAITING_GRANT, S.RECONCILING, S.CANCELLING, S.WAITING_JOB}
)
_ENDED = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED})
_STOPS = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.NEEDS_INPUT})


def _R(sources: frozenset[RunStatus], targets: frozenset[RunStatus], *trace: str) -> Rule:
    return Rule(sources, targets, frozenset(trace))


RULES: Final[Mapping[RunEvent, Rule]] = {
    RunEvent.FORWARD_PROPOSAL: _R(
        frozenset({S.RUNNING}), frozenset({S.RUNNING}), "proposal.received"
    ),
    RunEvent.REPLAN: _R(
        frozenset({S.RUNNING}),
        frozenset({S.RUNNING}),
        "proposal.rejected",
        "model.output.invalid",
        "command.lease_expired",
        "plan.revised",  # a planner's plan (or its wait, below): a step with no tool call
        "planner.waiting",
    ),
    RunEvent.ISSUE_COMMAND: _R(frozenset({S.RUNNING}), frozenset({S.RUNNING}), "command.issued"),
    RunEvent.REISSUE_COMMAND: _R(
        frozenset({S.RUNNING, S.RECONCILING}), frozenset({S.RUNNING}), "tool.retry.scheduled"
    ),
    RunEvent.REQUEST_CONFIRMATION: _R(
        frozenset({S.RUNNING}), frozenset({S.WAITING_CONFIRMATION}), "confirmation.requested"
    ),
    RunEvent.RESUME_AFTER_CONFIRMATION: _R(
        frozenset({S.WAITING_CONFIRMATION}),
        frozenset({S.RUNNING}),
        "confirmation.approved",
        "confirmation.declined",
    ),
    RunEvent.REQUEST_GRANT: _R(
        frozenset({S.RUNNING}), frozenset({S.WAITING_GRANT}), "grant.requested"
    ),
    RunEvent.RESUME_AFTER_GRANT: _R(
        frozenset({S.WAITING_GRANT}), frozenset({S.RUNNING}), "grant.added"
    ),
    RunEvent.CONCLUDE_TOOL: _R(
        frozenset({S.RUNNING, S.CANCELLING}),
        frozenset({S.RUNNING, S.CANCELLING, S.FAILED, S.CANCELLED, S.NEEDS_INPUT}),
        "tool.completed",
        "job.settled",  # a parallel step's sub-run ended (its job's poll concludes the branch)
    ),
    RunEvent.ENTER_RECONCILIATION: _R(
        frozenset({S.RUNNING, S.CANCELLING, S.RECONCILING}),
        frozenset({S.RECONCILING, S.CANCELLING}),
        "effect.reconciliation_required",
    ),
    RunEvent.RECORD: _R(_ALL, _ALL, "tool.completed", "effect.found_late", "job.settled"),
    RunEvent.RECONCILED_APPLIED: _R(
        frozenset({S.RECONCILING}), frozenset({S.RUNNING}), "effect.reconciled"
    ),
    RunEvent.AWAIT_JOB: _R(
        frozenset({S.RUNNING, S.CANCELLING, S.RECONCILING}),
        frozenset({S.WAITING_JOB, S.CANCELLING}),
        "job.accepted",
    ),
    RunEvent.JOB_SETTLED: _R(frozenset({S.WAITING_JOB}), frozenset({S.RUNNING}), "job.settled"),
    RunEvent.STOP: _R(_ACTIVE, _STOPS, "run.stopped"),
    RunEvent.CANCEL: _R(
        frozenset(
            {
                S.RUNNING,
                S.WAITING_CONFIRMATION,
                S.WAITING_GRANT,
                S.RECONCILING,
                S.NEEDS_INPUT,
                S.WAITING_JOB,
            }
        ),
        frozenset({S.CANCELLING, S.CANCELLED}),
        "cancel.requested",
    ),
    RunEvent.FINISH_CANCEL: _R(frozenset({S.CANCELLING}), frozenset({S.CANCELLED}), "run.stopped"),
    RunEvent.HAND_OFF: _R(_ACTIVE | {S.NEEDS_INPUT}, frozenset({S.HANDOFF}), "handoff.created"),
    RunEvent.ANSWER: _R(
        frozenset({S.NEEDS_INPUT}), frozenset({S.RUNNING}), "clarification.answered"
    ),
    RunEvent.RESOLVE: _R(frozenset({S.HANDOFF}), _STOPS, "handoff.resolved"),
    RunEvent.REOPEN_FOR_LATE_EFFECT: _R(
        _ENDED,
        frozenset({S.HANDOFF}),
        "handoff.created",
    ),
}
"""Every allowed change: event → (from statuses, to statuses, trace event)."""


@dataclass(frozen=True, kw_only=True)
class Change:
    """One compare-and-set: the run's column changes and the trace events it records."""

    run_id: str
    version: int
    """The version the change expects (the commit raises it by one)."""
    event: RunEvent
    source: RunStatus
    target: RunStatus
    changes: dict[str, Any]
    events: tuple[Event, ...]

    @property
    def stop_reason(self) -> str | None:
        reason = self.changes.get("stop_reason")
        return str(reason) if reason is not None else None


def make_change(
    event: RunEvent,
    view: RunView,
    target: RunStatus,
    changes: Mapping[str, Any],
    events: Sequence[Event],
) -> Change:
    rule = RULES[event]
    same = event is not RunEvent.RECORD or target is view.status
    if view.status not in rule.sources or target not in rule.targets or not same:
        raise IllegalTransition(
            f"{event.value}: {view.status.value} -> {target.value} is not a declared transition"
        )
    names = {name for name, _ in events}
    if not rule.trace & names:
        raise IllegalTransition(f"{event.value} records none of {sorted(rule.trace)}")
    if target is not view.status and "state.transitioned" not in names:
        raise IllegalTransition(f"{event.value} changes the status without state.transitioned")
    out = dict(changes)
    if target is not view.status:
        out["status"] = target.value
    return Change(
        run_id=view.run_id,
        version=view.version,
        event=event,
        source=view.status,
        target=target,
        changes=out,
        events=tuple(events),
    )


@dataclass(frozen=True)
class Start:
    """A new run's first status, phase and trace events (it has no earlier view to change)."""

    status: RunStatus
    phase: Phase
    events: tuple[Event, ...]


def start(*, created: Mapping[str, Any]) -> Start:
    """A run is created: it is ``running``, planning first; ``run.created`` carries ``created``
    and the first ``state.transitioned`` comes from no status."""
    moved = {"from": None, "to": RunStatus.RUNNING.value, "from_version": None, "to_version": 1}
    first = ("state.transitioned", moved)
    return Start(RunStatus.RUNNING, Phase.PLANNING, (("run.created", dict(created)), first))


def transitioned(view: RunView, target: RunStatus) -> Event:
    """``state.transitioned``: the status and the state version before and after (a change
    commits as a compare-and-set from ``view.version`` to the next one)."""
    versions = {"from_version": view.version, "to_version": view.version + 1}
    return ("state.transitioned", {"from": view.status.value, "to": target.value, **versions})


def stop_changes(stop: Stop) -> dict[str, Any]:
    changes: dict[str, Any] = {
        "phase": Phase.IDLE.value,
        "stop_reason": stop.reason.value,
        "stop_detail": stop.detail or None,
        "pending_proposal_id": None,
        "active_command_id": None,
        "fan_out": None,
    }
    if stop.status.terminal:
        changes["finished_at"] = NOW
    if stop.answer is not None:
        changes["answer"] = stop.answer
    return changes


#: A counter a step charges (a run column), by the budget snapshot's key for it.
_SNAPSHOT_KEYS = {"tokens_used": "tokens", "cost_used": "cost"}


def snapshot_after(view: RunView, step: int, counters: Mapping[str, Any]) -> dict[str, Any]:
    """The run's budget snapshot after ``step`` with ``counters`` charged: always the keys of
    :meth:`RunView.budget_snapshot` (a counter it has no key for is left out)."""
    snapshot = {**view.budget_snapshot(), "step": step}
    for name, value in counters.items():
        key = _SNAPSHOT_KEYS.get(name, name)
        if key in snapshot:
            snapshot[key] = round(value, 6) if key == "cost" else value
    return snapshot


def stop_events(view: RunView, stop: Stop, step: int, counters: Mapping[str, Any]) -> list[Event]:
    """``state.transitioned`` and ``run.stopped`` with a budget snapshot after the step."""
    snapshot = snapshot_after(view, step, counters)
    stopped = {"status": stop.status.value, "reason": stop.reason.value, "budget": snapshot}
    if stop.detail:
        stopped["detail"] = stop.detail
    return [transitioned(view, stop.status), ("run.stopped", stopped)]


def charge_tool_usage(
    change: Change,
    view: RunView,
    *,
    tokens: int,
    cost: float,
    details: Mapping[str, Any],
) -> Change:
    """``change`` with a tool call's reported usage added to the run's token and cost counters
    (the budgets the planner's calls count against), in the same compare-and-set."""
    changes = {
        **change.changes,
        "tokens_used": view.tokens_used + tokens,
        "cost_used": view.cost_used + cost,
    }
    charged = ("tool.usage.charged", {"tokens": tokens, "cost": cost, **details})
    return dataclasses.replace(change, changes=changes, events=(*change.events, charged))


# --- within a running run ----------------------------------------------------------------------


def forward_proposal(
    view: RunView,
    *,
    received: dict[str, Any],
    counters: Mapping[str, Any],
    events: Sequence[Event] = (),
) -> Change:
    """The planner proposed a tool call: the policy gate is next."""
    changes = {**counters, "phase": Phase.POLICY.value, "pending_proposal_id": NEXT_PROPOSAL_ID}
    trace = [*events, ("proposal.received", received)]
    return make_change(RunEvent.FORWARD_PROPOSAL, view, S.RUNNING, changes, trace)


def replan(
    view: RunView,
    *,
    why: Sequence[Event],
    counters: Mapping[str, Any] | None = None,
    events: Sequence[Event] = (),
) -> Change:
    """The step ends without an effect (a refused proposal, an unreadable reply, a lost read):
    the planner is asked again. ``why`` holds the trace events saying which."""
    changes = {
        **(counters or {}),
        "phase": Phase.PLANNING.value,
        "pending_proposal_id": None,
        "active_command_id": None,
    }
    trace = [*events, *why]
    return make_change(RunEvent.REPLAN, view, S.RUNNING, changes, trace)


def issue_command(
    view: RunView,
    *,
    command_id: str,
    tool: str,
    issued: dict[str, Any],
    events: Sequence[Event] = (),
) -> Change:
    """The gate accepted: one command for ``tool``, counted against the budgets."""
    changes = {
        **_tool_call_counted(view, tool),
        "pending_proposal_id": None,
        "active_command_id": command_id,
    }
    trace = [*events, ("command.issued", {"command_id": command_id, "tool": tool, **issued})]
    return make_change(RunEvent.ISSUE_COMMAND, view, S.RUNNING, changes, trace)


def fan_out(
    view: RunView,
    *,
    issued: Sequence[tuple[str, str, dict[str, Any]]],
    fanned: dict[str, Any],
    events: Sequence[Event] = (),
) -> Change:
    """The gate accepted calls of a parallel step: one command each (``issued``: command id,
    tool, details), all counted against the budgets; the run keeps the open step
    (``fanned``: :class:`~warrant.runner.fan_in.FanOut`) until its verdict."""
    changes: dict[str, Any] = {"pending_proposal_id": None, "active_command_id": issued[0][0]}
    counted = view
    for _, tool, _ in issued:
        changes |= _tool_call_counted(counted, tool)
        counted = dataclasses.replace(
            counted,
            tool_calls=changes["tool_calls"],
            tool_calls_by_tool=changes["tool_calls_by_tool"],
        )
    changes["fan_out"] = fanned
    trace = [
        *events,
        *(("command.issued", {"command_id": c, "tool": t, **d}) for c, t, d in issued),
        ("step.fanned_out", {"rule": fanned["rule"], "calls": len(fanned["branches"])}),
    ]
    return make_change(RunEvent.ISSUE_COMMAND, view, S.RUNNING, changes, trace)


def merge_step(view: RunView, *, merged: dict[str, Any], events: Sequence[Event]) -> Change:
    """A parallel step's merge rule decided (``merged``: its verdict and branches, traced as
    ``step.merged``): the planner goes on. ``events`` holds the last branch's
    ``tool.completed``."""
    changes = {"phase": Phase.PLANNING.value, "active_command_id": None, "fan_out": None}
    trace = [*events, ("step.merged", merged)]
    return make_change(RunEvent.CONCLUDE_TOOL, view, S.RUNNING, changes, trace)


def reissue_command(
    view: RunView, *, tool: str, scheduled: dict[str, Any], events: Sequence[Event] = ()
) -> Change:
    """Another attempt of the same command (same idempotency token), after a retryable failure
    or an effect reconciled as not applied. It counts as a tool call."""
    changes: dict[str, Any] = {**_tool_call_counted(view, tool), "stop_reason": None}
    trace = [*events, ("tool.retry.scheduled", scheduled)]
    if view.status is not S.RUNNING:
        trace.append(transitioned(view, S.RUNNING))
    return make_change(RunEvent.REISSUE_COMMAND, view, S.RUNNING, changes, trace)


def _tool_call_counted(view: RunView, tool: str) -> dict[str, Any]:
    by_tool = dict(view.tool_calls_by_tool)
    by_tool[tool] = by_tool.get(tool, 0) + 1
    return {
        "phase": Phase.TOOL.value,
        "tool_calls": view.tool_calls + 1,
        "tool_calls_by_tool": by_tool,
    }


# --- confirmation ------------------------------------------------------------------------------


def request_confirmation(
    view: RunView, *, proposal_hash: str, tool: str, events: Sequence[Event] = ()
) -> Change:
    """A person must confirm this exact proposal before it runs."""
    target = S.WAITING_CONFIRMATION
    changes = {
        "phase": Phase.IDLE.value,
        "stop_reason": StopReason.USER_CONFIRMATION_REQUIRED.value,
    }
    trace = [
        *events,
        ("confirmation.requested", {"proposal_hash": proposal_hash, "tool": tool}),
        transitioned(view, target),
    ]
    return make_change(RunEvent.REQUEST_CONFIRMATION, view, target, changes, trace)


def resume_after_confirmation(
    view: RunView, *, approved: bool, decided: dict[str, Any], deadline_at: float | None = None
) -> Change:
    """A person decided: the gate looks at the proposal again (and finds the decision).
    ``deadline_at``: the run's deadline moved on by the time it waited (a deadline that pauses
    while a person is asked: ``confirmation_rules.resumed_deadline``)."""
    name = "confirmation.approved" if approved else "confirmation.declined"
    changes: dict[str, Any] = {"phase": Phase.POLICY.value, "stop_reason": None}
    if deadline_at is not None:
        changes["deadline_at"] = datetime.fromtimestamp(deadline_at, tz=UTC)
        moved = round(deadline_at - view.deadline_at, 3)
        decided = {**decided, "deadline_moved_s": moved}
    trace = [(name, decided), transitioned(view, S.RUNNING)]
    return make_change(RunEvent.RESUME_AFTER_CONFIRMATION, view, S.RUNNING, changes, trace)


def request_grant(
    view: RunView, *, request: dict[str, Any], events: Sequence[Event] = ()
) -> Change:
    """The pending proposal needs a grant the run lacks; the run waits for an operator's grant
    (``request``: tool, capabilities, resources, step, proposal hash, code), kept as the
    run's ``stop_detail`` while it waits."""
    target = S.WAITING_GRANT
    changes = {
        "phase": Phase.IDLE.value,
        "stop_reason": StopReason.GRANT_REQUIRED.value,
        "stop_detail": request,
    }
    trace = [*events, ("grant.requested", request), transitioned(view, target)]
    return make_change(RunEvent.REQUEST_GRANT, view, target, changes, trace)


def resume_after_grant(view: RunView, *, added: dict[str, Any]) -> Change:
    """A grant was added: the gate looks at the same pending proposal again (not re-planned)."""
    changes = {"phase": Phase.POLICY.value, "stop_reason": None, "stop_detail": None}
    trace = [("grant.added", added), transitioned(view, S.RUNNING)]
    return make_change(RunEvent.RESUME_AFTER_GRANT, view, S.RUNNING, changes, trace)


# --- tool outcomes and unknown effects ---------------------------------------------------------


def conclude_tool(
    view: RunView,
    *,
    tool: str,
    succeeded: bool,
    write: bool,
    code: str | None,
    stop_reason: StopReason | None,
    step: int,
    events: Sequence[Event],
    message: str | None = None,
    made: Sequence[dict[str, Any]] = (),
) -> Change:
    """A known outcome (succeeded, rejected or failed) of the run's command. ``events`` holds
    the attempt's ``tool.completed``. A cancelling run ends; a running one goes back to the
    planner, fails when the outcome says the run cannot go on (``stop_reason``; the stop detail
    keeps the tool's ``message``; a budget stop, ``made``: the artifacts already made), or asks
    its user (``CLARIFICATION_REQUIRED``: Tool.errors)."""
    if view.status is S.CANCELLING:
        effect = "applied" if succeeded and write else "none"
        ended = Stop(S.CANCELLED, StopReason.CANCELLED, {"effect": effect, "tool": tool})
        return _ended(RunEvent.CONCLUDE_TOOL, view, ended, step=step, events=events)
    if view.status is not S.RUNNING:
        return record_only(view, events=events)
    if stop_reason is not None:
        detail = {"tool": tool, "code": code} | ({"message": message} if message else {})
        why = f"{tool} refused the call ({code}): {message or 'no reason given'}. How to go on?"
        asks = stop_reason is StopReason.CLARIFICATION_REQUIRED  # a declared ask_user refusal
        status, question = (S.NEEDS_INPUT, why) if asks else (S.FAILED, None)
        failed = Stop(status, stop_reason, detail, question).with_artifacts(made)
        return _ended(RunEvent.CONCLUDE_TOOL, view, failed, step=step, events=events)
    changes = {"phase": Phase.PLANNING.value, "active_command_id": None}
    return make_change(RunEvent.CONCLUDE_TOOL, view, S.RUNNING, changes, events)


def enter_reconciliation(
    view: RunView,
    *,
    required: dict[str, Any],
    detail: dict[str, Any] | None = None,
    events: Sequence[Event] = (),
) -> Change:
    """The command's effect is unknown: the reconciler finds out. A cancelling run stays
    cancelling (it ends once the effect is known); a running one becomes ``reconciling``; a
    reconciling one stays so (a parallel step's next call whose effect is unknown)."""
    trace = [*events, ("effect.reconciliation_required", required)]
    if view.status is S.CANCELLING:
        changes: dict[str, Any] = {"phase": Phase.IDLE.value}
        return make_change(RunEvent.ENTER_RECONCILIATION, view, S.CANCELLING, changes, trace)
    changes = {"phase": Phase.IDLE.value, "stop_reason": StopReason.UNKNOWN_EFFECT.value}
    if detail is not None:
        changes["stop_detail"] = detail
    if view.status is not S.RECONCILING:
        trace.append(transitioned(view, S.RECONCILING))
    return make_change(RunEvent.ENTER_RECONCILIATION, view, S.RECONCILING, changes, trace)


def reconciled_applied(
    view: RunView,
    *,
    reconciled: Event,
    merged: dict[str, Any] | None = None,
    waits_on: str | None = None,
) -> Change:
    """The reconciler found the effect applied: the run goes on with the planner. For a
    parallel step's call: ``merged``, the step's verdict it decided (``step.merged``), or
    ``waits_on``, a call of the step still in flight whose outcome will decide it."""
    changes: dict[str, Any] = {
        "phase": Phase.PLANNING.value,
        "stop_reason": None,
        "active_command_id": None,
    }
    trace = [reconciled]
    if merged is not None:
        changes["fan_out"] = None
        trace.append(("step.merged", merged))
    elif waits_on is not None:
        changes |= {"phase": Phase.TOOL.value, "active_command_id": waits_on}
    trace.append(transitioned(view, S.RUNNING))
    return make_change(RunEvent.RECONCILED_APPLIED, view, S.RUNNING, changes, trace)


def await_job(view: RunView, *, accepted: dict[str, Any], events: Sequence[Event]) -> Change:
    """A long-running tool's job was accepted (or found by reconciliation): the run waits for
    it (``waiting_job``; a cancelling run stays cancelling until the job says how it ended)."""
    trace = [*events, ("job.accepted", accepted)]
    changes: dict[str, Any] = {"phase": Phase.IDLE.value}
    if view.status is S.RECONCILING:
        changes["stop_reason"] = None
    if view.status is S.CANCELLING:
        return make_change(RunEvent.AWAIT_JOB, view, S.CANCELLING, changes, trace)
    trace.append(transitioned(view, S.WAITING_JOB))
    return make_change(RunEvent.AWAIT_JOB, view, S.WAITING_JOB, changes, trace)


def job_settled(view: RunView, *, settled: dict[str, Any], events: Sequence[Event] = ()) -> Change:
    """The job ended (succeeded or failed): the planner goes on with its final observation."""
    changes = {"phase": Phase.PLANNING.value, "active_command_id": None}
    trace = [*events, ("job.settled", settled), transitioned(view, S.RUNNING)]
    return make_change(RunEvent.JOB_SETTLED, view, S.RUNNING, changes, trace)


def record_only(view: RunView, *, events: Sequence[Event]) -> Change:
    """Facts that no longer move the run (see :attr:`RunEvent.RECORD`)."""
    return make_change(RunEvent.RECORD, view, view.status, {}, events)


# --- ends --------------------------------------------------------------------------------------


def _ended(
    event: RunEvent,
    view: RunView,
    ended: Stop,
    *,
    step: int,
    counters: Mapping[str, Any] | None = None,
    events: Sequence[Event] = (),
) -> Change:
    counters = counters or {}
    changes = {**counters, **stop_changes(ended)}
    if ended.reason in BUDGET_STOPS:  # which budget ran out, what was made: on the run too
        snapshot = snapshot_after(view, step, counters)
        changes["stop_detail"] = {**ended.detail, "budget": snapshot}
    trace = [*events, *stop_events(view, ended, step, counters)]
    return make_change(event, view, ended.status, changes, trace)


def stop(
    view: RunView,
    ended: Stop,
    *,
    step: int,
    counters: Mapping[str, Any] | None = None,
    events: Sequence[Event] = (),
) -> Change:
    """The run stops (completed, failed, cancelled, needs input) for ``ended.reason``; the
    ``run.stopped`` event carries a budget snapshot after ``step`` (with ``counters``)."""
    return _ended(RunEvent.STOP, view, ended, step=step, counters=counters, events=events)


def cancel(view: RunView, *, in_flight: bool, requested: dict[str, Any]) -> Change:
    """An operator cancels. Nothing in flight: the run is cancelled at once. A tool running or
    an effect unknown: ``cancelling`` until the effect is known (:func:`finish_cancel`)."""
    asked = ("cancel.requested", requested)
    if in_flight:
        trace = [asked, transitioned(view, S.CANCELLING)]
        return make_change(RunEvent.CANCEL, view, S.CANCELLING, {}, trace)
    ended = Stop(S.CANCELLED, StopReason.CANCELLED, {"effect": "none"})
    return _ended(RunEvent.CANCEL, view, ended, step=view.step, events=[asked])


def finish_cancel(view: RunView, *, effect: str, step: int, events: Sequence[Event] = ()) -> Change:
    """End a ``cancelling`` run once its in-flight effect is known (``applied`` or ``none``)."""
    ended = Stop(S.CANCELLED, StopReason.CANCELLED, {"effect": effect})
    return _ended(RunEvent.FINISH_CANCEL, view, ended, step=step, events=events)


def hand_off(
    view: RunView,
    *,
    handoff_id: str,
    reason: str,
    events: Sequence[Event] = (),
    counters: Mapping[str, Any] | None = None,
) -> Change:
    """A person takes over (an unknown effect the reconciler cannot settle, a loop the spec
    wants looked at, an unclassified failure, a planner's escalation: ``counters`` charges
    its step)."""
    return _handoff(RunEvent.HAND_OFF, view, handoff_id, reason, events, counters=counters)


def reopen_for_late_effect(view: RunView, *, handoff_id: str, events: Sequence[Event]) -> Change:
    """An effect was found after the run ended (an attempt judged lost that was not): the one
    change out of a terminal status, to a person, with ``effect.found_late`` in ``events``."""
    return _handoff(
        RunEvent.REOPEN_FOR_LATE_EFFECT, view, handoff_id, StopReason.UNKNOWN_EFFECT.value, events
    )


def _handoff(
    event: RunEvent,
    view: RunView,
    handoff_id: str,
    reason: str,
    events: Sequence[Event],
    *,
    counters: Mapping[str, Any] | None = None,
) -> Change:
    changes = {**(counters or {}), "phase": Phase.IDLE.value, "stop_reason": reason}
    trace = [
        *events,
        ("handoff.created", {"handoff_id": handoff_id, "reason": reason}),
        transitioned(view, S.HANDOFF),
    ]
    return make_change(event, view, S.HANDOFF, changes, trace)


def resolve(
    view: RunView,
    *,
    outcome: RunStatus,
    by: str,
    resolved: dict[str, Any],
    previous_reason: str | None,
) -> Change:
    """A person resolved the handoff: the run ends as ``outcome``, ``RESOLVED_BY_HUMAN``."""
    detail = {"by": by, "outcome": outcome.value, "previous_reason": previous_reason}
    ended = Stop(outcome, StopReason.RESOLVED_BY_HUMAN, detail)
    return _ended(
        RunEvent.RESOLVE, view, ended, step=view.step, events=[("handoff.resolved", resolved)]
    )


def answer(view: RunView, *, answered: dict[str, Any]) -> Change:
    """A person answered the run's clarifying question: the planner goes on (the answer is
    the commit's observation)."""
    changes = {"phase": Phase.PLANNING.value, "stop_reason": None, "stop_detail": None}
    trace = [("clarification.answered", answered), transitioned(view, S.RUNNING)]
    return make_change(RunEvent.ANSWER, view, S.RUNNING, changes, trace)
