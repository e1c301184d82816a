"""The delegation rule (issue 53): each hop can only narrow. Pure: no service."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.gate import gate, grant, proposal
from warrant.runner import fan_in
from warrant.runner.codes import Phase, Rejection, RunStatus
from warrant.runner.delegation import Refusal, Terms, scope_within, terms
from warrant.runner.gate import Accept, Reject
from warrant.runner.scopes import ResourceKind
from warrant.runner.spec import Budgets
from warrant.runner.views import GrantView, RunView
from warrant.tools._builtin import DelegateInput

NOW = 1_800_000_000.0


def parent(**over) -> RunView:
    fields = {
        "run_id": "p",
        "status": RunStatus.RUNNING,
        "phase": Phase.POLICY,
        "version": 3,
        "step": 1,
        "model_calls": 1,
        "tool_calls": 0,
        "observation_version": 1,
        "deadline_at": NOW + 100,
        "subject": "u",
        "budgets": Budgets(max_tool_calls=4, max_model_calls=8),
        **over,
    }
    return RunView(**fields)


def held(grant_id: int, capability: str, scope: str = "*", **over) -> GrantView:
    fields = {
        "grant_id": grant_id,
        "run_id": "p",
        "capability": capability,
        "resource_scope": scope,
        "expires_at_step": None,
        "max_uses": None,
        "uses": 0,
        **over,
    }
    return GrantView(**fields)


def ask(grants, **budgets) -> DelegateInput:
    return DelegateInput.model_validate(
        {
            "goal": "g",
            "planner": {"kind": "fixture", "outputs": []},
            "grants": grants,
            "budgets": budgets,
        }
    )


def decide(request, grants, *, run=None, run_policy=None, kinds=None):
    return terms(
        request,
        parent=run or parent(),
        grants=grants,
        run_policy=run_policy or {},
        kinds=kinds or (lambda c: frozenset({None})),
        now=NOW,
        counted=False,
    )


REFUND_A = held(1, "payments:refund", "order:A")
LOOKUP = held(2, "lookup:read")


def test_a_narrower_child_gets_its_terms_and_its_budgets_are_carved():
    found = decide(ask([{"capability": "lookup:read", "resource_scope": "records"}]), [LOOKUP])
    assert isinstance(found, Terms)
    assert found.spec["subject"] == "u" and found.depth == 0
    # the parent has 4 tool calls, this call takes one: the child gets the smaller of 4 and 3
    assert found.spec["budgets"]["max_tool_calls"] == 3
    assert found.reserved.tool_calls == 3 and found.reserved.model_calls == 7
    assert found.spec["budgets"]["deadline_s"] == 100


@pytest.mark.parametrize(
    "grant",
    [
        {"capability": "payments:refund", "resource_scope": "order:B"},  # another order
        {"capability": "payments:refund"},  # every order
        {"capability": "payments:refund", "resource_scope": "order:*"},
        {"capability": "payments:payout", "resource_scope": "order:A"},  # not held at all
        {"capability": "lookup:read", "destinations_from": ["goal"]},  # task-scoped
    ],
)
def test_a_wider_grant_is_refused_before_the_child_exists(grant):
    found = decide(ask([grant]), [REFUND_A, LOOKUP])
    assert isinstance(found, Refusal) and found.code == Rejection.DELEGATION_WIDENS_GRANT


def test_uses_and_expiry_only_narrow():
    limited = held(3, "lookup:read", max_uses=3, uses=1)
    assert isinstance(decide(ask([{"capability": "lookup:read"}]), [limited]), Refusal)
    too_many = ask([{"capability": "lookup:read", "max_uses": 3}])
    assert isinstance(decide(too_many, [limited]), Refusal)
    found = decide(ask([{"capability": "lookup:read", "max_uses": 2}]), [limited])
    assert isinstance(found, Terms) and found.reserved.grant_uses == ((0, 3, 2),)
    ends = held(4, "lookup:read", expires_at=NOW + 50)
    later = datetime.fromtimestamp(NOW + 60, tz=UTC).isoformat()
    earlier = datetime.fromtimestamp(NOW + 40, tz=UTC).isoformat()
    assert isinstance(decide(ask([{"capability": "lookup:read"}]), [ends]), Refusal)
    assert isinstance(
        decide(ask([{"capability": "lookup:read", "expires_at": later}]), [ends]), Refusal
    )
    assert isinstance(
        decide(ask([{"capability": "lookup:read", "expires_at": earlier}]), [ends]), Terms
    )
    expired = held(5, "lookup:read", expires_at_step=0)
    assert isinstance(decide(ask([{"capability": "lookup:read"}]), [expired]), Refusal)


@pytest.mark.parametrize(
    ("budgets", "run"),
    [
        ({"max_tool_calls": 4}, parent()),  # 3 left after this call
        ({"max_model_calls": 8}, parent()),  # 7 left
        ({"max_tokens": 101}, parent(budgets=Budgets(max_tokens=200), tokens_used=100)),
        ({"max_tokens": None}, parent(budgets=Budgets(max_tokens=200))),
        ({"max_cost": 1.5}, parent(budgets=Budgets(max_cost=2.0), cost_used=1.0)),
        ({"deadline_s": 101}, parent()),
    ],
)
def test_a_budget_beyond_the_parents_remainder_is_refused(budgets, run):
    found = decide(ask([{"capability": "lookup:read"}], **budgets), [LOOKUP], run=run)
    assert isinstance(found, Refusal) and found.code == Rejection.DELEGATION_OVER_BUDGET


def test_depth_and_fan_out():
    lookup = ask([{"capability": "lookup:read"}])
    too_deep = decide(lookup, [LOOKUP], run_policy={"max_delegation_depth": 0})
    assert isinstance(too_deep, Refusal) and too_deep.code == Rejection.DELEGATION_TOO_DEEP
    two = parent(tool_calls_by_tool={"delegate": 2})
    wide = decide(lookup, [LOOKUP], run=two, run_policy={"max_children": 2})
    assert isinstance(wide, Refusal) and wide.code == Rejection.DELEGATION_FAN_OUT
    deeper = decide(lookup, [LOOKUP], run_policy={"max_delegation_depth": 3})
    assert isinstance(deeper, Terms) and deeper.spec["policy"]["max_delegation_depth"] == 2


@pytest.mark.parametrize(
    ("child", "scope", "kinds", "inside"),
    [
        ("order:A", "order:*", {None}, True),
        ("order:A*", "order:*", {None}, True),
        ("order:*", "order:A*", {None}, False),
        ("*", "order:*", {None}, False),
        ("acct-1", "acct-*", {ResourceKind.IDENTIFIER}, True),
        ("acct-[0-9]", "acct-*", {ResourceKind.IDENTIFIER}, False),
        ("/data/reports", "/data", {ResourceKind.PATH}, True),
        ("/data", "/data/reports", {ResourceKind.PATH}, False),
        # a prefix scope means something else to a typed kind: never proved narrower
        ("/data*/x", "/data*", {ResourceKind.PATH}, False),
        ("alice@example.com", "alice*", {ResourceKind.EMAIL}, False),
        ("a@example.com", "@example.com", {ResourceKind.EMAIL}, False),
        # one capability read two ways: narrower under both, or refused
        ("order:A", "order:*", {None, ResourceKind.PATH}, False),
    ],
)
def test_scope_within_is_conservative_per_resource_kind(child, scope, kinds, inside):
    assert scope_within(child, scope, kinds) is inside


def test_a_parallel_steps_children_are_carved_one_after_the_other():
    """The gate takes each accepted child's reservation before it judges the next call of the
    set: a child left with no model call is refused, never started to fail."""

    def child(pid: str, **budgets: int) -> dict:
        arguments = {
            "goal": "g",
            "planner": {"kind": "fixture", "outputs": []},
            "grants": [{"capability": "search:public", "resource_scope": "public"}],
            "budgets": budgets,
        }
        return proposal("delegate", arguments, proposal_id=pid)

    grants = [grant("search:public", "public"), grant("runs:delegate", grant_id=2)]
    base = gate(None, grants=grants, budgets=Budgets(max_tool_calls=8, max_model_calls=7))
    calls = [
        child("a", max_model_calls=3, max_tool_calls=2),
        child("b", max_model_calls=3),
        child("c"),
    ]
    first, second, third = (d for _, _, d in fan_in.gate_calls(base, calls))
    assert isinstance(first, Accept) and isinstance(second, Accept)
    assert isinstance(third, Reject) and third.code == Rejection.DELEGATION_OVER_BUDGET
