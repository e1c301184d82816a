"""The run state machine: random event sequences keep its invariants.

Each step draws one of the named producers with random arguments and applies it to the
current view the way the ledger does (status to the change's target, version + 1). A
producer refusing the current status (``IllegalTransition``) leaves the run as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gate import run
from warrant.runner import run_machine as machine
from warrant.runner.codes import TERMINAL_STATUSES, Phase, RunStatus, StopReason
from warrant.runner.run_machine import RULES, Change, IllegalTransition, RunEvent, Stop
from warrant.runner.views import RunView

STOP_REASONS = {r.value for r in StopReason}
EVENT: tuple[str, dict[str, Any]] = ("tool.completed", {"tool": "t", "status": "succeeded"})

#: Where a stop may end: a terminal status, or waiting for the user's answer.
STOP_STATUSES = sorted(TERMINAL_STATUSES | {RunStatus.NEEDS_INPUT})
stops = st.builds(
    Stop,
    st.sampled_from(STOP_STATUSES),
    st.sampled_from(list(StopReason)),
    st.dictionaries(st.sampled_from(["code", "tool"]), st.text(max_size=5), max_size=2),
)

#: Every producer, with a strategy for its arguments (all but the view).
Producer = Callable[[RunView], Change]
producers: list[st.SearchStrategy[Producer]] = [
    st.just(lambda v: machine.forward_proposal(v, received={"kind": "tool"}, counters={})),
    st.just(lambda v: machine.replan(v, why=[("proposal.rejected", {"code": "X"})])),
    st.just(lambda v: machine.issue_command(v, command_id="c1", tool="t", issued={"version": "1"})),
    st.just(lambda v: machine.reissue_command(v, tool="t", scheduled={"attempt": 2})),
    st.just(lambda v: machine.request_confirmation(v, proposal_hash="h", tool="t")),
    st.booleans().map(
        lambda ok: lambda v: machine.resume_after_confirmation(v, approved=ok, decided={})
    ),
    st.just(lambda v: machine.request_grant(v, request={"tool": "t", "capability": "c"})),
    st.just(lambda v: machine.resume_after_grant(v, added={"grant_id": 1, "by": "op"})),
    st.tuples(st.booleans(), st.booleans(), st.sampled_from([None, *StopReason])).map(
        lambda a: (
            lambda v: machine.conclude_tool(
                v,
                tool="t",
                succeeded=a[0],
                write=a[1],
                code=None,
                stop_reason=a[2],
                step=v.step,
                events=[EVENT],
            )
        )
    ),
    st.just(lambda v: machine.enter_reconciliation(v, required={"tool": "t"})),
    st.just(lambda v: machine.reconciled_applied(v, reconciled=("effect.reconciled", {}))),
    st.just(lambda v: machine.await_job(v, accepted={"tool": "t"}, events=[EVENT])),
    st.just(lambda v: machine.job_settled(v, settled={"tool": "t", "status": "succeeded"})),
    st.just(lambda v: machine.record_only(v, events=[EVENT])),
    st.just(lambda v: machine.answer(v, answered={"by": "alice"})),
    stops.map(lambda s: lambda v: machine.stop(v, s, step=v.step)),
    st.booleans().map(lambda f: lambda v: machine.cancel(v, in_flight=f, requested={})),
    st.sampled_from(["applied", "none"]).map(
        lambda e: lambda v: machine.finish_cancel(v, effect=e, step=v.step)
    ),
    st.just(lambda v: machine.hand_off(v, handoff_id="h1", reason="UNKNOWN_EFFECT")),
    st.sampled_from(sorted(TERMINAL_STATUSES)).map(
        lambda o: (
            lambda v: machine.resolve(v, outcome=o, by="op", resolved={}, previous_reason=None)
        )
    ),
    st.just(
        lambda v: machine.reopen_for_late_effect(
            v, handoff_id="h2", events=[("effect.found_late", {})]
        )
    ),
]


def _commit(view: RunView, change: Change) -> RunView:
    """What :func:`warrant.ledger.repo.commit` does to the run's status and version."""
    assert change.version == view.version, "a change is made from the view it commits over"
    return dataclasses.replace(view, status=change.target, version=change.version + 1)


def _check(view: RunView, change: Change) -> None:
    rule = RULES[change.event]
    assert change.source is view.status
    assert view.status in rule.sources and change.target in rule.targets
    names = [name for name, _ in change.events]
    assert rule.trace & set(names), f"{change.event} without its trace event"
    if change.target is not view.status:
        assert change.changes["status"] == change.target.value
        transitioned = [d for n, d in change.events if n == "state.transitioned"]
        moved = {"from": view.status.value, "to": change.target.value}
        versions = {"from_version": view.version, "to_version": view.version + 1}
        assert transitioned == [moved | versions]
    else:
        assert "status" not in change.changes
    if view.status.terminal and change.target is not view.status:
        assert change.event is RunEvent.REOPEN_FOR_LATE_EFFECT
        assert change.target is RunStatus.HANDOFF
        assert "effect.found_late" in names
    if change.target in STOP_STATUSES and change.target is not view.status:
        stopped = [d for n, d in change.events if n == "run.stopped"]
        assert len(stopped) == 1 and stopped[0]["reason"] in STOP_REASONS
        assert set(stopped[0]["budget"]) == set(view.budget_snapshot())  # one shape, every path
        assert change.changes["stop_reason"] in STOP_REASONS
        assert change.changes["phase"] == Phase.IDLE.value
    entered = change.target is not view.status
    if entered and change.target in (
        RunStatus.WAITING_CONFIRMATION,
        RunStatus.WAITING_GRANT,
        RunStatus.HANDOFF,
    ):
        assert change.changes["stop_reason"]


@settings(max_examples=400, deadline=None)
@given(
    start=st.sampled_from(list(RunStatus)),
    steps=st.lists(st.one_of(*producers), min_size=1, max_size=30),
)
def test_random_event_sequences_keep_the_invariants(
    start: RunStatus, steps: list[Producer]
) -> None:
    view = run(status=start, version=1)
    for produce in steps:
        try:
            change = produce(view)
        except IllegalTransition:
            continue
        _check(view, change)
        after = _commit(view, change)
        assert after.version == view.version + 1
        view = after


def test_every_declared_event_has_a_producer_that_reaches_it() -> None:
    seen: set[RunEvent] = set()
    for status in RunStatus:
        for strategy in producers:
            for produce in _examples(strategy):
                with contextlib.suppress(IllegalTransition):
                    seen.add(produce(run(status=status)).event)
    assert seen == set(RunEvent)


def _examples(strategy: st.SearchStrategy[Producer]) -> list[Producer]:
    found: list[Producer] = []

    @settings(max_examples=20, database=None)
    @given(strategy)
    def collect(p: Producer) -> None:
        found.append(p)

    collect()
    return found


@pytest.mark.parametrize(
    ("status", "produce"),
    [
        (RunStatus.COMPLETED, lambda v: machine.cancel(v, in_flight=False, requested={})),
        (RunStatus.FAILED, lambda v: machine.hand_off(v, handoff_id="h", reason="X")),
        (
            RunStatus.RUNNING,
            lambda v: machine.resolve(
                v, outcome=RunStatus.FAILED, by="op", resolved={}, previous_reason=None
            ),
        ),
        (RunStatus.HANDOFF, lambda v: machine.forward_proposal(v, received={}, counters={})),
        (
            RunStatus.RUNNING,
            lambda v: machine.reopen_for_late_effect(
                v, handoff_id="h", events=[("effect.found_late", {})]
            ),
        ),
        (
            RunStatus.CANCELLED,
            lambda v: machine.stop(v, Stop(RunStatus.FAILED, StopReason.INTERNAL_ERROR), step=1),
        ),
    ],
)
def test_undeclared_changes_are_refused(status: RunStatus, produce: Producer) -> None:
    with pytest.raises(IllegalTransition) as err:
        produce(run(status=status))
    assert err.value.code == "ILLEGAL_TRANSITION"


def test_a_change_without_its_trace_event_is_refused() -> None:
    with pytest.raises(IllegalTransition, match="records none of"):
        machine.replan(run(), why=[("something.else", {})])


def test_a_run_starts_by_the_machine_running_and_planning():
    first = machine.start(created={"grants": 2})
    assert (first.status, first.phase) == (RunStatus.RUNNING, Phase.PLANNING)
    assert first.events == (
        ("run.created", {"grants": 2}),
        (
            "state.transitioned",
            {"from": None, "to": "running", "from_version": None, "to_version": 1},
        ),
    )
