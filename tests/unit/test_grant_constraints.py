"""Grants with constraints on argument values (000 §5 ``constraints``; ``Grant.constraints``):
the rule itself, the gate's authorization layer refusing a call that breaks one
(``GRANT_CONSTRAINT_VIOLATED``), and delegation keeping or tightening them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.gate import gate, grant, proposal
from tests.unit.test_delegation import ask, decide, held
from warrant.runner.codes import Rejection
from warrant.runner.delegation import Refusal, Terms
from warrant.runner.gate import Accept, AwaitConfirmation, Reject
from warrant.runner.grant_bounds import Bounds, wider_on
from warrant.runner.policy import evaluate
from warrant.runner.spec import Grant, GrantConstraints

CAP = {"max": {"amount_cents": 10_000}, "in": {"currency": ["EUR"]}}


def constraints(given: dict) -> GrantConstraints:
    return GrantConstraints.model_validate(given)


def refund(amount: int = 1_500, currency: str = "EUR") -> dict:
    arguments = {"order_id": "ord_1", "amount_cents": amount, "currency": currency}
    return proposal("issue_refund", arguments)


def test_the_rule_names_the_argument_and_the_limit_never_the_value():
    rule = constraints(CAP)
    assert rule.violation({"amount_cents": 10_000, "currency": "EUR"}) is None
    over = rule.violation({"amount_cents": 12_345, "currency": "EUR"})
    assert over is not None and "amount_cents" in over and "10000" in over
    assert "12345" not in over
    other = rule.violation({"amount_cents": 1, "currency": "USD"})
    assert other is not None and "currency" in other and "EUR" in other


@pytest.mark.parametrize(
    "arguments",
    [
        {"currency": "EUR"},  # the capped argument missing: fail closed
        {"amount_cents": "50", "currency": "EUR"},  # not a number
        {"amount_cents": True, "currency": "EUR"},  # a boolean is no amount
        {"amount_cents": [5, 20_000], "currency": "EUR"},  # every element of a list
        {"amount_cents": 5, "currency": ["EUR", "USD"]},
        {"amount_cents": 5},
    ],
)
def test_the_rule_fails_closed(arguments):
    assert constraints(CAP).violation(arguments) is not None


def test_a_spec_grant_takes_typed_constraints_and_keeps_its_json_names():
    given = Grant.model_validate({"capability": "payments:refund", "constraints": CAP})
    assert given.model_dump(mode="json", exclude_none=True)["constraints"] == CAP
    for bad in ({"max": {"amount": "100"}}, {"max": {"amount": True}}, {"below": {"a": 1}}):
        with pytest.raises(ValidationError):
            Grant.model_validate({"capability": "x", "constraints": bad})


def test_the_gate_refuses_a_refund_over_the_cap_before_anything_runs():
    capped = [grant("payments:refund", constraints=constraints(CAP))]
    over = evaluate(gate(refund(50_000), grants=capped))
    assert isinstance(over, Reject) and over.code == Rejection.GRANT_CONSTRAINT_VIOLATED
    assert over.layer == "authorization" and "amount_cents" in (over.message or "")
    usd = evaluate(gate(refund(currency="USD"), grants=capped))
    assert isinstance(usd, Reject) and usd.code == Rejection.GRANT_CONSTRAINT_VIOLATED
    within = evaluate(gate(refund(9_999), grants=capped))
    assert not isinstance(within, Reject), within  # past the grants (a person confirms it)
    assert isinstance(within, Accept | AwaitConfirmation)


def test_a_grant_whose_constraints_hold_is_the_one_used():
    small = grant("payments:refund", grant_id=1, constraints=constraints(CAP))
    large = grant(
        "payments:refund", grant_id=2, constraints=constraints({"max": {"amount_cents": 90_000}})
    )
    found = evaluate(gate(refund(50_000), grants=[small, large]))
    assert not isinstance(found, Reject), found
    assert isinstance(found, Accept | AwaitConfirmation)
    if isinstance(found, Accept):
        assert found.grant_ids == (2,)


@pytest.mark.parametrize(
    ("child", "narrower"),
    [
        (CAP, True),  # the same
        ({"max": {"amount_cents": 500}, "in": {"currency": ["EUR"]}}, True),  # tighter
        ({**CAP, "in": {"currency": ["EUR"], "order_id": ["ord_1"]}}, True),  # one more
        ({"max": {"amount_cents": 20_000}, "in": {"currency": ["EUR"]}}, False),  # higher cap
        ({"max": {"amount_cents": 500}, "in": {"currency": ["EUR", "USD"]}}, False),  # more
        ({"max": {"amount_cents": 500}}, False),  # the currency constraint dropped
        (None, False),  # all of them dropped
    ],
)
def test_a_child_grant_keeps_or_tightens_its_parents_constraints(child, narrower):
    parent = held(1, "payments:refund", constraints=constraints(CAP))
    asked = {"capability": "payments:refund", **({"constraints": child} if child else {})}
    found = decide(ask([asked]), [parent])
    if narrower:
        assert isinstance(found, Terms), found
        assert found.spec["grants"][0].get("constraints") == child
    else:
        assert isinstance(found, Refusal) and found.code == Rejection.DELEGATION_WIDENS_GRANT


def test_a_parent_without_constraints_may_give_constrained_grants():
    found = decide(
        ask([{"capability": "payments:refund", "constraints": CAP}]), [held(1, "payments:refund")]
    )
    assert isinstance(found, Terms)


def test_an_operator_grant_that_drops_or_loosens_a_standing_constraint_is_a_widening():
    standing = Bounds(constraints=constraints(CAP))
    assert wider_on(Bounds(), standing, kinds=()) == ("constraints",)
    looser = Bounds(constraints=constraints({**CAP, "max": {"amount_cents": 20_000}}))
    assert wider_on(looser, standing, kinds=()) == ("constraints",)
    tighter = Bounds(constraints=constraints({**CAP, "max": {"amount_cents": 5_000}}))
    assert wider_on(tighter, standing, kinds=()) == ()
    assert wider_on(standing, Bounds(), kinds=()) == ()  # adding a constraint only narrows
