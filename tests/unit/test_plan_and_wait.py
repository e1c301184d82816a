"""The planner's plan and its wait (issue 54, item 3), as pure decisions: a plan is a graph
(known dependencies, no cycle) revised step by step, an unchanged one refused; a wait is
bounded (the run's ``max_wait_s``, the deadline) and wakes only at its time or its event; the
view carries the plan, open questions, pending effects and approved actions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from warrant.runner.codes import Rejection
from warrant.runner.memory_view import PLAN_SOURCE, ObservationRecord, build_view
from warrant.runner.planners.openai_compatible import functions, parse_reply, render_view
from warrant.runner.planning import MAX_WAIT_S, Plan, Wait
from warrant.runner.spec import Budgets
from warrant.runner.step_decisions import (
    WAIT_POLL_S,
    Hold,
    Refuse,
    Revise,
    check_wait,
    interpret,
    plan_revision,
    wake_of,
)

NODES: list[dict[str, Any]] = [
    {"id": "find", "description": "find the order", "done_when": "an order id is known"},
    {"id": "refund", "description": "refund it", "depends_on": ["find"]},
]


def plan(nodes=NODES, **more) -> dict:
    return {"kind": "plan", "nodes": nodes, **more}


def test_a_plan_is_recorded_at_its_step():
    decision = interpret(plan(open_questions=["which card?"]), [])
    assert isinstance(decision, Revise)
    assert [n.id for n in decision.plan.nodes] == ["find", "refund"]
    assert decision.plan.open_questions == ["which card?"]


@pytest.mark.parametrize(
    ("nodes", "problem"),
    [
        ([{"id": "a", "description": "x", "depends_on": ["nowhere"]}], "unknown node nowhere"),
        (
            [
                {"id": "a", "description": "x", "depends_on": ["b"]},
                {"id": "b", "description": "y", "depends_on": ["c"]},
                {"id": "c", "description": "z", "depends_on": ["a"]},
            ],
            "dependency cycle",
        ),
        ([{"id": "a", "description": "x", "depends_on": ["a"]}], "dependency cycle"),
        ([{"id": "a", "description": "x"}, {"id": "a", "description": "y"}], "duplicate"),
        ([{"id": "a", "description": "x", "status": "maybe"}], "status"),
        ([], "nodes"),
    ],
)
def test_a_plan_that_is_no_graph_is_refused_at_its_step(nodes, problem):
    decision = interpret(plan(nodes), [])
    assert isinstance(decision, Refuse)
    assert decision.code is Rejection.PLAN_INVALID
    assert problem in decision.reason


def test_a_plan_is_bounded():
    many = [{"id": f"n{i}", "description": "x"} for i in range(51)]
    long = [{"id": "a", "description": "x" * 501}]
    for nodes in (many, long):
        decision = interpret(plan(nodes), [])
        assert isinstance(decision, Refuse) and decision.code is Rejection.PLAN_INVALID


def test_each_revision_counts_up_and_an_unchanged_plan_is_refused():
    first = plan_revision(Plan.model_validate(plan()), None, step=1)
    assert not isinstance(first, Refuse)
    assert (first["revision"], first["step"]) == (1, 1)
    again = plan_revision(Plan.model_validate(plan(reason_summary="same")), first, step=2)
    assert isinstance(again, Refuse) and again.code is Rejection.PLAN_UNCHANGED
    done = [{**NODES[0], "status": "done"}, NODES[1]]
    second = plan_revision(Plan.model_validate(plan(done)), first, step=3)
    assert not isinstance(second, Refuse)
    assert (second["revision"], second["nodes"][0]["status"]) == (2, "done")


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "wait", "reason": "r"},  # neither
        {"kind": "wait", "seconds": 1, "until": "pending_effects_settled", "max_seconds": 2},
        {"kind": "wait", "until": "pending_effects_settled"},  # no bound
        {"kind": "wait", "until": "tomorrow", "max_seconds": 2},
        {"kind": "wait", "seconds": 0},
        {"kind": "wait", "seconds": -1},
        {"kind": "wait", "seconds": MAX_WAIT_S + 1},
        {"kind": "wait", "seconds": 1, "max_seconds": 2},
    ],
)
def test_a_malformed_wait_is_refused_at_its_step(raw):
    decision = interpret(raw, [])
    assert isinstance(decision, Refuse) and decision.code is Rejection.WAIT_INVALID


def test_a_wait_is_bounded_by_the_runs_max_wait_and_its_deadline():
    wait = Wait(kind="wait", seconds=30)
    assert isinstance(interpret(wait.model_dump(), []), Hold)
    too_long = check_wait(wait, now=100.0, deadline_at=1000.0, max_wait_s=10.0, step=3)
    assert isinstance(too_long, Refuse) and too_long.code is Rejection.WAIT_TOO_LONG
    past = check_wait(wait, now=100.0, deadline_at=120.0, max_wait_s=300.0, step=3)
    assert isinstance(past, Refuse) and past.code is Rejection.WAIT_PAST_DEADLINE
    event = Wait(kind="wait", until="pending_effects_settled", max_seconds=50)
    past = check_wait(event, now=100.0, deadline_at=140.0, max_wait_s=300.0, step=3)
    assert isinstance(past, Refuse) and past.code is Rejection.WAIT_PAST_DEADLINE


def test_a_wait_stores_its_wake_time_for_its_step():
    stored = check_wait(
        Wait(kind="wait", seconds=2), now=100.0, deadline_at=1000.0, max_wait_s=300.0, step=3
    )
    assert stored == {
        "step": 3,
        "since": 100.0,
        "until_at": 102.0,
        "seconds": 2,
        "wake_at": 102.0,
    }
    event = Wait(kind="wait", until="pending_effects_settled", max_seconds=30)
    stored = check_wait(event, now=100.0, deadline_at=1000.0, max_wait_s=300.0, step=3)
    assert not isinstance(stored, Refuse)
    assert (stored["wake_at"], stored["until_at"]) == (100.0 + WAIT_POLL_S, 130.0)


def test_the_budget_bounds_max_wait():
    assert Budgets().max_wait_s == 300
    for bad in (0, -1, MAX_WAIT_S + 1):
        with pytest.raises(ValidationError):
            Budgets(max_wait_s=bad)


SECONDS = {"step": 3, "seconds": 2, "wake_at": 102.0, "until_at": 102.0}
EVENT = {
    "step": 3,
    "until": "pending_effects_settled",
    "max_seconds": 30,
    "wake_at": 101.0,
    "until_at": 130.0,
}


def wake(waiting, *, step=3, now=102.0, pending=0):
    return wake_of(waiting, step=step, now=now, pending_effects=pending, tolerance_s=0.5)


def test_a_delivery_before_the_wake_time_does_not_plan():
    assert wake(None).action == "plan"
    assert wake(SECONDS, now=100.0).action == "early"
    assert wake(SECONDS, now=101.6).action == "plan"  # within the clocks' tolerance
    assert (wake(SECONDS).action, wake(SECONDS).why) == ("plan", "seconds")
    assert wake(SECONDS, step=4, now=100.0).action == "plan"  # the run planned since
    early = wake(SECONDS, now=100.0)
    assert early.next_at == 102.0  # sent again for its wake time


def test_an_event_wait_polls_until_its_event_or_its_bound():
    polled = wake(EVENT, now=105.0, pending=1)
    assert (polled.action, polled.next_at) == ("poll", 105.0 + WAIT_POLL_S)
    assert wake(EVENT, now=100.0, pending=1).action == "early"
    settled = wake(EVENT, now=105.0, pending=0)
    assert (settled.action, settled.why) == ("plan", "pending_effects_settled")
    over = wake(EVENT, now=130.0, pending=2)
    assert (over.action, over.why) == ("plan", "max_seconds")
    assert wake(EVENT, now=129.3, pending=1).next_at == 130.0


def view(**state):
    goal = ObservationRecord(
        observation_id="user-1", kind="user", source="user", step=0, content={"goal": "g"}
    )
    return build_view(
        run_id="r",
        step=3,
        observations=[goal],
        tools=[],
        budgets={},
        preferences={},
        **state,
    )


STORED_PLAN = {
    "nodes": NODES,
    "open_questions": ["which card?"],
    "reason_summary": "",
    "revision": 2,
    "step": 1,
}


def test_the_view_carries_plan_questions_pending_effects_and_approved_actions():
    empty = view()
    assert (empty.plan, empty.open_questions) == (None, [])
    assert (empty.pending_effects, empty.approved_actions) == ([], [])
    full = view(
        plan=STORED_PLAN,
        pending_effects=[["c-1", "pay", 2, "in_flight"]],
        approved_actions=[
            ["confirmation", "pay", "ab" * 32, "k-1"],
            ["pre_approval", "x", "cd", 7],
        ],
    )
    assert full.plan is not None
    assert (full.plan["source"], full.plan["revision"]) == (PLAN_SOURCE, 2)
    assert full.open_questions == ["which card?"]
    assert full.pending_effects == [
        {"command_id": "c-1", "tool": "pay", "step": 2, "status": "in_flight"}
    ]
    assert full.approved_actions[0] == {
        "kind": "confirmation",
        "tool": "pay",
        "proposal_hash": "ab" * 32,
        "id": "k-1",
    }
    assert full.approved_actions[1]["id"] == "7"
    assert empty.view_hash() != full.view_hash()
    text = render_view(full)
    assert "YOUR PLAN (your own notes, not evidence)" in text
    assert "YOUR OPEN QUESTIONS" in text and "PENDING EFFECTS" in text
    assert "APPROVED ACTIONS" in text
    assert "YOUR PLAN" not in render_view(empty)


def _reply(name: str, arguments: dict) -> dict:
    call = {"function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"choices": [{"message": {"tool_calls": [call]}}]}


def test_the_model_planner_offers_plan_and_wait_and_reads_them_back():
    shown = view()
    names = [f["function"]["name"] for f in functions(shown)]
    assert "plan" in names and "wait" in names
    out = parse_reply(
        _reply("plan", {"nodes": NODES, "reason_summary": "two steps"}), shown, proposal_id="p"
    )
    assert isinstance(interpret(out, []), Revise)
    out = parse_reply(_reply("wait", {"seconds": 5, "reason": "queue"}), shown, proposal_id="p")
    assert out == {"kind": "wait", "seconds": 5, "reason": "queue"}
    assert isinstance(interpret(out, []), Hold)
