"""Observe mode on the pure gate: a grant refusal of an observed tool is traced
``gate.would_refuse`` and let through; every other refusal stands (fail-safe)."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from tests.gate import gate, grant, proposal
from warrant.broker.app import observe_warning
from warrant.runner import policy
from warrant.runner.cli.run_shown import last_refusal
from warrant.runner.cli.runs import cut_at_word
from warrant.runner.observe import WOULD_REFUSE, would_refusals
from warrant.runner.settings import WarrantSettings

SEARCH = proposal()  # search_public, capability search:public


def observing(raw, observed, **kw):
    return policy.evaluate(dataclasses.replace(gate(raw, **kw), observed=frozenset(observed)))


def would_refuse(decision) -> list[dict]:
    return [e.details for e in decision.events if e.name == WOULD_REFUSE]


@pytest.mark.parametrize("observed", [{"search_public"}, {"*"}])
def test_a_missing_grant_of_an_observed_tool_is_traced_and_let_through(observed):
    d = observing(SEARCH, observed, grants=[])
    assert isinstance(d, policy.Accept) and d.grant_ids == ()
    assert would_refuse(d) == [
        {
            "code": "MISSING_CAPABILITY",
            "layer": "authorization",
            "tool": "search_public",
            "observed": True,
        }
    ]
    names = [e.name for e in d.events]
    assert names.index(WOULD_REFUSE) == names.index("policy.capability.checked") + 1


def test_a_tool_not_observed_is_refused():
    d = observing(SEARCH, {"save_preference"}, grants=[])
    assert isinstance(d, policy.Reject) and d.code == "MISSING_CAPABILITY"
    assert would_refuse(d) == []


def test_out_of_scope_is_observed():
    d = observing(SEARCH, {"*"}, grants=[grant("search:public", "internal")])
    assert isinstance(d, policy.Accept)
    (seen,) = would_refuse(d)
    assert seen["code"] == "RESOURCE_OUT_OF_SCOPE"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (proposal(arguments={"query": 7}), "INVALID_QUERY"),
        (proposal(arguments={"query": "x", "sudo": True}), "UNKNOWN_INPUT_FIELD"),
        (proposal("rm_rf"), "UNKNOWN_TOOL_OR_VERSION"),
        ("not a proposal", "PROPOSAL_PARSE_FAILED"),
        (proposal("save_preference", {"key": "auto_approve", "value": "x"}), None),
    ],
)
def test_parse_registry_schema_and_semantic_refusals_are_never_observed(raw, code):
    d = observing(raw, {"*"}, grants=[])
    assert isinstance(d, policy.Reject) and would_refuse(d) == []
    assert d.code == (code or "MEMORY_KEY_NOT_ALLOWED")


def test_confirmation_is_never_observed():
    """An observed write without a grant goes on to the confirmation layer, which asks a
    person as always."""
    save = proposal("save_preference", {"key": "answer_language", "value": "zh"})
    d = observing(save, {"*"}, grants=[])
    assert isinstance(d, policy.AwaitConfirmation)
    assert [w["code"] for w in would_refuse(d)] == ["MISSING_CAPABILITY"]


def test_budgets_are_never_observed():
    d = observing(SEARCH, {"*"}, grants=[], tool_calls=50)
    assert isinstance(d, policy.Halt) and d.reason.value == "MAX_TOOL_CALLS_REACHED"


def test_the_setting_is_off_by_default_and_star_stands_alone():
    assert WarrantSettings().observed_tools == frozenset()
    assert observe_warning(WarrantSettings()) is None
    assert WarrantSettings(observe_tools=" a, b ").observed_tools == {"a", "b"}
    with pytest.raises(ValidationError, match="stands alone"):
        WarrantSettings(observe_tools="*,a")
    warning = observe_warning(WarrantSettings(observe_tools="*"))
    assert warning is not None and "OBSERVE MODE" in warning and "EVERY tool" in warning


def test_run_show_lists_them_and_why_does_not_call_them_refusals():
    trace = [
        {"event": "proposal.rejected", "step": 1, "details": {"code": "INVALID_QUERY"}},
        {
            "event": "policy.capability.checked",
            "step": 2,
            "details": {"code": "MISSING_CAPABILITY"},
        },
        {
            "event": WOULD_REFUSE,
            "step": 2,
            "proposal_id": "p2",
            "details": {"code": "MISSING_CAPABILITY", "layer": "authorization", "tool": "t"},
        },
        {"event": "policy.budget.checked", "step": 2, "details": {}},
    ]
    assert last_refusal(trace)["code"] == "INVALID_QUERY"
    assert would_refusals(trace) == [
        {
            "step": 2,
            "proposal_id": "p2",
            "code": "MISSING_CAPABILITY",
            "layer": "authorization",
            "tool": "t",
        }
    ]


def test_a_planner_failure_after_a_refusal_is_summed_up_by_the_refusal() -> None:
    """A fixture planner that ran out after its call was refused used to be summed up as
    ``FIXTURE_PLANNER_EXHAUSTED (model.failed):`` with an empty message."""
    refused = {
        "event": "proposal.rejected",
        "step": 1,
        "details": {"code": "UNKNOWN_TOOL_OR_VERSION", "message": "no tool nope@1"},
    }
    failed = {"event": "model.failed", "step": 2, "details": {"code": "FIXTURE_PLANNER_EXHAUSTED"}}
    shown = last_refusal([refused, failed])
    assert (shown["code"], shown["message"]) == ("UNKNOWN_TOOL_OR_VERSION", "no tool nope@1")
    alone = {
        "event": "model.failed",
        "step": 1,
        "details": {"code": "MODEL_FAILED", "error": "500"},
    }
    assert last_refusal([alone]) == {
        "event": "model.failed",
        "code": "MODEL_FAILED",
        "message": "error=500",
        "step": 1,
        "seq": None,
    }


def test_the_trace_table_cuts_details_after_a_whole_word() -> None:
    """The details column used to end mid-word (``...reason=the refund was alr``)."""
    text = "code=DUPLICATE_EFFECT, tool=issue_refund, reason=the refund was already issued today"
    cut = cut_at_word(text, 60)
    assert cut.endswith("…") and len(cut) <= 60
    assert text.startswith(cut[:-1]) and text[len(cut) - 1] in " ,"
    assert cut_at_word("short", 60) == "short"
    assert cut_at_word("x" * 80, 60) == "x" * 59 + "…"  # one long word: cut inside it
