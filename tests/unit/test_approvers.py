"""The pure rules of who may approve: requester ≠ approver by principal, its opt-outs, M of N
approvals counted by distinct principals, and the argument rule."""

from __future__ import annotations

import dataclasses

import pytest
from warrant_demo.tools import ISSUE_REFUND
from warrant_demo.tools_jobs import REFUND_ASYNC

from tests.approvals_tool import PAY, PAY_SELF_OK
from warrant.runner.canonical import proposal_hash
from warrant.runner.confirmation_rules import (
    add_approval,
    approvals_pending,
    approvals_required,
    corrected_call,
    principal_of,
    self_approval,
)
from warrant.runner.errors import ConfirmationRefused, Forbidden, InvalidRequest
from warrant.runner.settings import WarrantSettings
from warrant.tools._contract import IMPACT_UNAVAILABLE


def test_principal_is_the_token_name_whatever_the_role() -> None:
    assert principal_of("alice (producer)") == principal_of("alice (approver)") == "alice"
    assert principal_of("alice") == "alice"  # a local --by name, as given
    assert principal_of(None) is None and principal_of("  ") is None
    assert principal_of("bob (approver)") != principal_of("alice (approver)")


def test_the_starter_may_not_decide_by_default() -> None:
    assert WarrantSettings().approver_may_approve_own_runs is False
    with pytest.raises(Forbidden) as caught:
        self_approval(
            "alice (producer)", "alice (approver)", tool_allows=False, deployment_allows=False
        )
    assert caught.value.code == "OWN_RUN_APPROVAL_FORBIDDEN"


def test_another_principal_or_an_unknown_starter_is_no_self_approval() -> None:
    for started_by in ("alice (producer)", None):
        assert (
            self_approval(started_by, "bob (approver)", tool_allows=False, deployment_allows=False)
            is None
        )


def test_the_opt_outs_say_which_allowed_it() -> None:
    same = ("alice (producer)", "alice (operator)")
    assert self_approval(*same, tool_allows=True, deployment_allows=False) == "tool"
    assert self_approval(*same, tool_allows=False, deployment_allows=True) == "deployment"
    assert self_approval(*same, tool_allows=True, deployment_allows=True) == "tool"


def test_each_principal_counts_once() -> None:
    one = add_approval([], {"by": "alice (approver)"})
    with pytest.raises(ConfirmationRefused) as caught:
        add_approval(one, {"by": "alice (operator)"})
    assert caught.value.code == "ALREADY_APPROVED"
    two = add_approval(one, {"by": "bob (approver)"})
    assert [a["by"] for a in two] == ["alice (approver)", "bob (approver)"]


def test_the_argument_rule_asks_for_two_above_the_threshold() -> None:
    assert approvals_required(PAY, {"amount_cents": 100_000}) == 1
    assert approvals_required(PAY, {"amount_cents": 100_001}) == 2
    assert approvals_required(PAY_SELF_OK, {"amount_cents": 500}) == 1
    three = dataclasses.replace(PAY, approvals_required=3)
    assert approvals_required(three, {"amount_cents": 100_001}) == 3  # the larger counts


def test_a_rule_that_fails_fails_closed() -> None:
    def broken(arguments: object) -> int:
        raise KeyError("amount")

    assert approvals_required(dataclasses.replace(PAY, approvals_rule=broken), {}) == 2
    odd = dataclasses.replace(PAY, approvals_rule=lambda a: "2")  # type: ignore[arg-type,return-value]
    assert approvals_required(odd, {}) == 2
    assert approvals_required(dataclasses.replace(PAY, approvals_rule=None), {}) == 1


def test_pending_approvals_are_those_of_this_proposal_while_short() -> None:
    request = {"proposal_hash": "h", "approvals_required": 2, "approved_by": [{"by": "a"}]}
    assert approvals_pending(request, "h") == {"approvals_required": 2, "approved_by": ["a"]}
    assert approvals_pending(request, "other") is None
    full = {**request, "approved_by": [{"by": "a"}, {"by": "b"}]}
    assert approvals_pending(full, "h") is None
    assert approvals_pending(None, "h") is None
    old = {"proposal_hash": "h"}  # a request recorded before M of N: one approval, none yet
    assert approvals_pending(old, "h") == {"approvals_required": 1, "approved_by": []}


def test_the_deployment_may_ask_more_approvals_of_a_tool(monkeypatch) -> None:
    monkeypatch.setenv("WARRANT_APPROVALS_REQUIRED", "pay=2, send_notice=3")
    assert WarrantSettings().approvals_floor == {"pay": 2, "send_notice": 3}
    monkeypatch.setenv("WARRANT_APPROVALS_REQUIRED", "")
    assert WarrantSettings().approvals_floor == {}
    for bad in ("pay", "pay=0", "pay=two", "=2"):
        monkeypatch.setenv("WARRANT_APPROVALS_REQUIRED", bad)
        with pytest.raises(ValueError, match="WARRANT_APPROVALS_REQUIRED"):
            WarrantSettings()


# --- a person corrects a parameter instead of approving as is (000 §14, 003: 估计影响, 允许修改)

ORIGINAL = {"payee": "acme", "amount_cents": 500, "ledger": "/tmp/payments"}


def test_a_correction_is_a_new_call_with_its_own_hash_and_counts_as_one_approval() -> None:
    made = corrected_call(PAY, ORIGINAL, {"amount_cents": 300})
    assert made.arguments == {**ORIGINAL, "amount_cents": 300}
    assert made.changed == ["amount_cents"]
    assert made.proposal_hash == proposal_hash("pay", "1", made.arguments)
    assert made.proposal_hash != proposal_hash("pay", "1", ORIGINAL)
    assert made.approves  # one approver suffices: the edit is that person's approval


def test_a_correction_that_needs_more_people_or_a_shown_state_is_no_approval() -> None:
    assert not corrected_call(PAY, ORIGINAL, {"amount_cents": 150_000}).approves  # M of N
    assert not corrected_call(PAY, ORIGINAL, {"amount_cents": 300}, floor=2).approves
    with_state = dataclasses.replace(PAY, precondition=lambda args, ctx: "balance")
    assert not corrected_call(with_state, ORIGINAL, {"amount_cents": 300}).approves


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({}, "CORRECTION_EMPTY"),
        ({"amount_cents": 500}, "CORRECTION_EMPTY"),  # the proposal's own value
        ({"recipient": "x"}, "CORRECTION_INVALID"),  # no such argument
        ({"amount_cents": "300"}, "CORRECTION_INVALID"),  # the schema is strict
        ({"amount_cents": 0}, "CORRECTION_INVALID"),
    ],
)
def test_a_correction_that_changes_nothing_or_breaks_the_schema_is_refused(changes, code) -> None:
    with pytest.raises(InvalidRequest) as caught:
        corrected_call(PAY, ORIGINAL, changes)
    assert caught.value.code == code


def test_a_secret_argument_is_never_corrected() -> None:
    hidden = dataclasses.replace(PAY, secret_fields=frozenset({"ledger"}))
    with pytest.raises(InvalidRequest) as caught:
        corrected_call(hidden, ORIGINAL, {"ledger": "/tmp/elsewhere"})
    assert caught.value.code == "CORRECTION_INVALID"


def test_the_estimated_impact_is_computed_from_the_arguments_or_says_not_declared() -> None:
    assert PAY.estimated_impact(ORIGINAL) == "pay 5.00 to acme"
    assert dataclasses.replace(PAY, impact=None).estimated_impact(ORIGINAL) == "not declared"
    structured = dataclasses.replace(PAY, impact=lambda a: {"amount": a.amount_cents})
    assert structured.estimated_impact(ORIGINAL) == {"amount": 500}
    failing = dataclasses.replace(PAY, impact=lambda a: f"{a.amount_cents / 0}")
    assert failing.estimated_impact(ORIGINAL) == IMPACT_UNAVAILABLE
    assert PAY.estimated_impact({"payee": "acme"}) == IMPACT_UNAVAILABLE  # invalid arguments


def test_the_demo_refund_declares_its_amount_currency_and_target() -> None:
    arguments = {"order_id": "ord_1", "amount_cents": 12_000, "currency": "EUR"}
    shown = {"amount": "120.00", "currency": "EUR", "target": "order ord_1"}
    assert ISSUE_REFUND.estimated_impact(arguments) == shown
    assert REFUND_ASYNC.estimated_impact(arguments) == shown
