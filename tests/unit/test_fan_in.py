"""The fan-in rule of a parallel step (``warrant.runner.fan_in``), pure: which verdict each
combination of branch outcomes gives, and what is cut."""

from __future__ import annotations

import pytest

from warrant.runner.codes import Phase, Rejection, RunStatus
from warrant.runner.fan_in import (
    PENDING,
    BranchPlan,
    BranchState,
    FanOut,
    check_set,
    merged,
    planned,
    verdict,
)
from warrant.runner.spec import Budgets, ParallelProposal
from warrant.runner.views import RunView


def _fan(require: int, *, cancel_when_met: bool = True, n: int = 3) -> FanOut:
    plans = tuple(BranchPlan(b, f"p{b}", "read", command_id=f"c{b}") for b in range(1, n + 1))
    return FanOut(1, "set", "rule", require, cancel_when_met, None, plans)


def _states(fan: FanOut, *statuses: str) -> list[BranchState]:
    return [BranchState(p, s) for p, s in zip(fan.branches, statuses, strict=True)]


@pytest.mark.parametrize(
    ("require", "statuses", "state", "cut"),
    [
        (3, ("succeeded", "succeeded", "succeeded"), "complete", ()),
        (3, ("succeeded", "failed", PENDING), "invalid", ("c3",)),
        (3, ("succeeded", PENDING, PENDING), "open", ()),
        (2, ("succeeded", "succeeded", PENDING), "partial", ("c3",)),
        (2, ("succeeded", "failed", PENDING), "open", ()),
        (2, ("succeeded", "failed", "cancelled"), "invalid", ()),
        (1, (PENDING, "succeeded", PENDING), "partial", ("c1", "c3")),
        (1, ("failed", "refused", "rejected"), "invalid", ()),
    ],
)
def test_the_rule_decides_from_the_branches(require, statuses, state, cut):
    fan = _fan(require)
    decided = verdict(fan, _states(fan, *statuses))
    assert decided.state == state
    assert decided.cut == cut


def test_a_rule_that_holds_waits_for_the_rest_when_told_not_to_cut():
    fan = _fan(2, cancel_when_met=False)
    assert verdict(fan, _states(fan, "succeeded", "succeeded", PENDING)).state == "open"
    done = verdict(fan, _states(fan, "succeeded", "succeeded", "cancelled"))
    assert (done.state, done.missing) == ("partial", (3,))


def test_a_set_that_cannot_hold_with_the_calls_accepted_runs_none():
    plans = (
        BranchPlan(1, "a", "read", command_id="c1"),
        BranchPlan(2, "b", "read", refused="RESOURCE_OUT_OF_SCOPE"),
    )
    fan = FanOut(1, "set", "all", 2, True, None, plans)
    decided, states = planned(fan)
    assert (decided.state, decided.cut) == ("invalid", ("c1",))
    said = merged(fan, states, decided)
    assert said["branches"][1]["code"] == "RESOURCE_OUT_OF_SCOPE"
    assert said["summary"].startswith("invalid")


def _view(tool_calls: int, max_tool_calls: int, **per_tool: int) -> RunView:
    budgets = Budgets(max_tool_calls=max_tool_calls, max_tool_calls_per_tool=per_tool)
    return RunView(
        run_id="r",
        status=RunStatus.RUNNING,
        phase=Phase.POLICY,
        version=1,
        step=1,
        model_calls=1,
        tool_calls=tool_calls,
        observation_version=1,
        deadline_at=0.0,
        subject="s",
        budgets=budgets,
    )


def _set(n: int, tool: str = "read") -> ParallelProposal:
    calls = [{"kind": "tool", "tool": tool, "arguments": {"n": i}} for i in range(n)]
    return ParallelProposal(kind="parallel", proposal_id="set", calls=calls)


def test_the_set_is_refused_whole_when_its_budget_does_not_fit():
    assert check_set(_view(0, 4), _set(3), max_calls=4) is None
    refused = check_set(_view(2, 4), _set(3), max_calls=4)
    assert refused is not None and refused.code is Rejection.PARALLEL_BUDGET_EXCEEDED
    capped = check_set(_view(0, 10, read=2), _set(3), max_calls=4)
    assert capped is not None and capped.detail["tool"] == "read"
    many = check_set(_view(0, 10), _set(3), max_calls=2)
    assert many is not None and many.code is Rejection.PARALLEL_TOO_MANY_CALLS


def test_a_write_in_flight_is_never_cut_the_step_waits_for_it():
    plans = (
        BranchPlan(1, "a", "read", command_id="c1"),
        BranchPlan(2, "b", "refund", command_id="c2", write=True),
        BranchPlan(3, "c", "read", command_id="c3"),
    )
    fan = FanOut(1, "set", "any", 1, True, None, plans)
    assert verdict(fan, _states(fan, "succeeded", PENDING, PENDING)).state == "open"
    done = verdict(fan, _states(fan, "succeeded", "failed", PENDING))
    assert (done.state, done.cut) == ("partial", ("c3",))  # the read is cut, once the write ended
    impossible = FanOut(1, "set", "all", 3, True, None, plans)
    assert verdict(impossible, _states(impossible, "failed", PENDING, PENDING)).state == "open"
    assert planned(impossible)[0].state == "open"  # nothing started: no wait (nothing refused)


def test_a_sets_calls_that_need_a_person_are_decided_each_by_its_hash():
    from warrant.runner.confirmation_rules import (
        approvals_pending,
        asked_call,
        undecided,
        waiting_for,
    )

    calls = [
        {"branch": 1, "status": "accepted", "proposal_hash": "a"},
        {"branch": 2, "status": "needs_person", "proposal_hash": "b", "approvals_required": 2},
        {"branch": 3, "status": "needs_person", "proposal_hash": "c", "approved_by": []},
    ]
    request = {"proposal_hash": "b", "parallel": {"calls": calls}}
    assert asked_call(request, "a") is None  # accepted by the gate: nobody decides it
    assert asked_call(request, "b") is calls[1] and asked_call(request, "zz") is None
    assert undecided(request) == waiting_for(request) == ["b", "c"]
    assert approvals_pending(request, "b") == {"approvals_required": 2, "approved_by": []}
    calls[2]["decision"] = "declined"
    calls[1]["approved_by"] = [{"by": "ann"}, {"by": "bea"}]
    assert approvals_pending(request, "b") is None and undecided(request) == ["b"]
    calls[1]["decision"] = "approved"
    assert waiting_for(request) == []
    single = {"proposal_hash": "s", "approvals_required": 2, "approved_by": [{"by": "ann"}]}
    assert asked_call(single, "s") is single and waiting_for(single) == ["s"]
