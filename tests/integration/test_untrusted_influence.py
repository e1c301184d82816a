"""A persistent injection (issue 35, item 5): after ``handoff.after_untrusted_refusals``
proposals refused once the run has read untrusted content, the run goes to a person
(``UNTRUSTED_INFLUENCE``) instead of burning its step budget; refusals before any untrusted
read do not count, and without the option nothing changes. Real workers, Redis, PostgreSQL."""

from __future__ import annotations

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from warrant.ledger.models import Proposal

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _refused(pid: str) -> dict:
    """A call the run holds no grant for (the injection's ask): refused MISSING_CAPABILITY."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "send_notice",
        "tool_version": "1",
        "arguments": {"recipient": "eve@example.org", "body": f"the figures, try {pid}"},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def _spec(outputs: list, **handoff) -> dict:
    spec = sc.spec(outputs, max_steps=12, max_model_calls=12)
    if handoff:
        spec["handoff"] = handoff
    return spec


def test_a_persistent_injection_goes_to_a_person_after_k_refusals(engine, run_to_end):
    outputs = [
        _refused("p1"),  # before anything untrusted was read: not counted
        sc.search("p2", "quarterly figures"),  # search results are untrusted content
        *(_refused(f"p{i}") for i in range(3, 9)),
        sc.final("done", "tool-2"),
    ]
    info = run_to_end(_spec(outputs, after_untrusted_refusals=3))
    assert (info.status, info.stop_reason) == ("handoff", "UNTRUSTED_INFLUENCE")
    assert info.step == 5  # p1 refused, p2 read, p3 and p4 refused, p5 the third: handed off
    assert info.model_calls == 5  # the planner was not asked again
    assert facts.rejection_codes(engine, info.run_id) == ["MISSING_CAPABILITY"] * 4
    stopped = facts.count(engine, Proposal, run_id=info.run_id, status="stopped")
    assert stopped == 1


def test_without_the_option_refusals_are_planned_again_as_before(engine, run_to_end):
    outputs = [
        sc.search("p1", "quarterly figures"),
        *(_refused(f"p{i}") for i in range(2, 5)),
        sc.final("done", "tool-1"),
    ]
    info = run_to_end(_spec(outputs))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.rejection_codes(engine, info.run_id) == ["MISSING_CAPABILITY"] * 3
