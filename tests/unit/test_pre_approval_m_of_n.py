"""A pre-approval is one person's word: it cannot stand for a call that needs M of N approvers
(the tool's ``approvals_required`` or rule, or the deployment's ``WARRANT_APPROVALS_REQUIRED``),
so the gate never takes such a call as confirmed without every approver (issue 36, item 1)."""

from __future__ import annotations

import pytest

from tests import approvals_tool
from warrant.runner.confirmation_rules import pre_approval_record
from warrant.runner.errors import SpecError
from warrant.runner.spec import PreApproval
from warrant.tools import Registry

REGISTRY = Registry([approvals_tool.PAY])


def _item(amount_cents: int) -> PreApproval:
    arguments = {"payee": "acme", "amount_cents": amount_cents, "ledger": "/tmp/x"}
    return PreApproval(tool="pay", tool_version="1", arguments=arguments, approved_by="carol")


def test_one_approver_calls_may_be_pre_approved():
    record = pre_approval_record(_item(500), REGISTRY, field="pre_approved.0")
    assert record["tool"] == "pay" and len(record["proposal_hash"]) == 64


def test_a_call_its_rule_gives_two_approvers_cannot_be_pre_approved():
    with pytest.raises(SpecError) as refused:
        pre_approval_record(
            _item(approvals_tool.THRESHOLD_CENTS + 1), REGISTRY, field="pre_approved.0"
        )
    assert refused.value.code == "SPEC_INVALID"
    assert refused.value.errors[0]["field"] == "pre_approved.0.approved_by"
    assert "2 distinct approvers" in str(refused.value)


def test_the_deployments_floor_counts_too():
    with pytest.raises(SpecError):
        pre_approval_record(_item(500), REGISTRY, field="pre_approval", floor={"pay": 2})
    assert pre_approval_record(_item(500), REGISTRY, field="pre_approval", floor={"other": 3})
