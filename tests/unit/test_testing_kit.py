"""``warrant.testing``: a plug-in author tests a tool's contract, the gate's verdict and the
outcome the workers would record, in process, with no service (issue 37, item 6)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests import approvals_tool, paid_tool
from warrant.testing import ToolHarness


def test_the_gate_refuses_a_call_the_run_holds_no_grant_for():
    harness = ToolHarness(paid_tool.TOOL)
    verdict = harness.propose({"query": "prices"})
    assert (verdict.decision, verdict.code) == ("refused", "MISSING_CAPABILITY")
    granted = harness.propose({"query": "prices"}, grants=[{"capability": paid_tool.CAPABILITY}])
    assert verdict.proposal_hash is None and granted.decision == "accepted"
    assert granted.events[0] == "proposal.parsed"
    assert granted.events[-1] == "policy.budget.checked"  # every layer ran, in order


def test_a_schema_invalid_proposal_is_refused_and_never_called():
    harness = ToolHarness(paid_tool.TOOL)
    grants = [{"capability": paid_tool.CAPABILITY}]
    verdict = harness.propose({"query": ""}, grants=grants)
    assert (verdict.decision, verdict.code) == ("refused", "INVALID_QUERY")
    with pytest.raises(ValidationError):
        harness.call({"query": ""})


def test_an_irreversible_call_needs_the_exact_proposal_approved(tmp_path):
    harness = ToolHarness(approvals_tool.PAY)
    arguments = {"payee": "acme", "amount_cents": 500, "ledger": str(tmp_path / "paid")}
    grants = [{"capability": approvals_tool.CAPABILITY}]
    asked = harness.propose(arguments, grants=grants, goal="pay acme")
    assert asked.decision == "needs_confirmation"
    assert asked.request is not None and asked.request["side_effect"] == "irreversible"
    approved = harness.propose(
        arguments, grants=grants, goal="pay acme", approved=[asked.proposal_hash]
    )
    assert approved.decision == "accepted"
    changed = harness.propose(
        {**arguments, "amount_cents": 501},
        grants=grants,
        goal="pay acme",
        approved=[asked.proposal_hash],
    )
    assert changed.decision == "needs_confirmation"  # the approval binds the exact call


def test_a_call_is_typed_as_the_workers_would_record_it(tmp_path):
    paid = ToolHarness(paid_tool.TOOL).call({"query": "q", "tokens": 7, "cost": 0.5})
    assert (paid.status, paid.output, paid.tokens, paid.cost) == (
        "succeeded",
        {"answer": "found q"},
        7,
        0.5,
    )
    refused = ToolHarness(paid_tool.TOOL).call({"query": "q", "outcome": "reject"})
    assert (refused.status, refused.code, refused.stop_reason) == (
        "rejected",
        "NOTHING_FOUND",
        None,
    )
    ledger = tmp_path / "paid"
    done = ToolHarness(approvals_tool.PAY).call(
        {"payee": "acme", "amount_cents": 5, "ledger": str(ledger)}
    )
    assert done.status == "succeeded" and ledger.read_text() == "acme 5\n"


def test_an_unclassified_exception_of_a_write_is_an_unknown_effect(tmp_path):
    missing = tmp_path / "no-such-dir" / "paid"
    crashed = ToolHarness(approvals_tool.PAY).call(
        {"payee": "acme", "amount_cents": 5, "ledger": str(missing)}
    )
    assert (crashed.status, crashed.code, crashed.stop_reason) == (
        "unknown",
        "TOOL_INTERNAL_ERROR",
        "UNKNOWN_EFFECT",
    )


def test_a_call_runs_the_tools_precheck_first_as_the_tool_stage_does(tmp_path):
    from tests import booking_tool

    served = booking_tool.service(tmp_path / "svc.json", ada=2)
    ledger = tmp_path / "bookings"
    harness = ToolHarness(booking_tool.BOOK, deps=booking_tool.Bookings())
    args = {"service": str(served), "customer": "bob", "seats": 1, "ledger": str(ledger)}
    refused = harness.call(args)  # no such customer: refused before the call, nothing booked
    assert (refused.status, refused.code) == ("rejected", "CUSTOMER_NOT_FOUND")
    assert booking_tool.bookings(ledger) == []
    done = harness.call({**args, "customer": "ada"})
    assert done.status == "succeeded" and booking_tool.bookings(ledger) == ["ada 1"]
    # a check that cannot be made fails the attempt (retryable), the tool not called
    broken = ToolHarness(booking_tool.BOOK, deps=None)
    failed = broken.call({**args, "customer": "ada"})
    assert (failed.status, failed.code, failed.retryable) == (
        "failed",
        "PRECONDITION_UNREADABLE",
        True,
    )
    assert booking_tool.bookings(ledger) == ["ada 1"]
