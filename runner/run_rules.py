"""The run state machine's declarations: every allowed status change, once.

``RULES`` maps each :class:`RunEvent` to the statuses it may leave from and go to and the
trace events it records; :func:`make_change` refuses anything else. The producers of changes
are in :mod:`warrant.runner.run_machine`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from warrant.runner.codes import ErrorCode, Phase, RunStatus, StopReason
from warrant.runner.errors import StateConflict
from warrant.runner.views import RunView

__all__ = [
    "NEXT_PROPOSAL_ID",
    "NOW",
    "RULES",
    "Change",
    "Event",
    "IllegalTransition",
    "Rule",
    "RunEvent",
    "Start",
    "Stop",
    "charge_tool_usage",
    "make_change",
    "start",
    "stop_changes",
    "stop_events",
    "transitioned",
]

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


S = RunStatus
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
        frozenset({S.RUNNING, S.CANCELLING, S.FAILED, S.CANCELLED}),
        "tool.completed",
    ),
    RunEvent.ENTER_RECONCILIATION: _R(
        frozenset({S.RUNNING, S.CANCELLING}),
        frozenset({S.RECONCILING, S.CANCELLING}),
        "effect.reconciliation_required",
    ),
    RunEvent.RECORD: _R(_ALL, _ALL, "tool.completed", "effect.found_late"),
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
    first = ("state.transitioned", {"from": None, "to": RunStatus.RUNNING.value})
    return Start(RunStatus.RUNNING, Phase.PLANNING, (("run.created", dict(created)), first))


def transitioned(view: RunView, target: RunStatus) -> Event:
    return ("state.transitioned", {"from": view.status.value, "to": target.value})


def stop_changes(stop: Stop) -> dict[str, Any]:
    changes: dict[str, Any] = {
        "phase": Phase.IDLE.value,
        "stop_reason": stop.reason.value,
        "stop_detail": stop.detail or None,
        "pending_proposal_id": None,
        "active_command_id": None,
    }
    if stop.status.terminal:
        changes["finished_at"] = NOW
    if stop.answer is not None:
        changes["answer"] = stop.answer
    return changes


def stop_events(view: RunView, stop: Stop, step: int, counters: Mapping[str, Any]) -> list[Event]:
    """``state.transitioned`` and ``run.stopped`` with a budget snapshot after the step."""
    snapshot = {**view.budget_snapshot(), "step": step, **counters}
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
