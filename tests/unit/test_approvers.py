"""The pure rules of who may approve: requester ≠ approver by principal, its opt-outs, M of N
approvals counted by distinct principals, and the argument rule."""

from __future__ import annotations

import dataclasses

import pytest

from tests.approvals_tool import PAY, PAY_SELF_OK
from warrant.runner.confirmation_rules import (
    add_approval,
    approvals_pending,
    approvals_required,
    principal_of,
    self_approval,
)
from warrant.runner.errors import ConfirmationRefused, Forbidden
from warrant.runner.settings import WarrantSettings


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
