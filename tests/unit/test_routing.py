"""The routing decision (001 §2.2): labels of a finite set, never the nearest one. Pure."""

from __future__ import annotations

import pytest

from warrant.runner.routing import (
    AskPerson,
    Routed,
    branch_problem,
    by_person,
    classify,
    final_of,
    output_of,
)
from warrant.runner.spec import RouterPlannerSpec
from warrant.tools._builtin import DelegateInput

READER = {"planner": {"kind": "fixture", "outputs": []}, "grants": [{"capability": "lookup:read"}]}
WRITER = {
    "planner": {"kind": "fixture", "outputs": []},
    "grants": [{"capability": "payments:refund", "resource_scope": "order:A"}],
    "high_risk": True,
}


def router(**over) -> RouterPlannerSpec:
    return RouterPlannerSpec.model_validate(
        {
            "kind": "router",
            "classifier": {"kind": "fixture", "outputs": []},
            "routes": {"billing_faq": READER, "refund": WRITER},
            **over,
        }
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"label": "unknown", "confidence": 0.99}, "unknown"),
        ({"label": "refunds", "confidence": 0.99}, "not_a_label"),  # never the nearest one
        ({"label": "billing_faq", "confidence": 0.4}, "low_confidence"),
        ({"label": "billing_faq"}, "low_confidence"),  # no confidence is none
        ({"label": "billing_faq", "confidence": True}, "low_confidence"),
        ("not json", "unreadable"),
        ({"kind": "tool", "tool": "issue_refund"}, "unreadable"),
    ],
)
def test_what_is_not_a_confident_label_goes_to_the_fallback(raw, reason):
    asked = classify(router(), raw)
    assert isinstance(asked, AskPerson) and asked.reason == reason
    read_only = classify(router(fallback="billing_faq"), raw)
    assert isinstance(read_only, Routed)
    assert (read_only.label, read_only.by, read_only.reason) == ("billing_faq", "fallback", reason)


def test_a_confident_label_routes_and_a_model_final_answer_may_carry_it():
    assert classify(router(), {"label": "Refund", "confidence": 0.9}) == Routed(
        label="refund", confidence=0.9, by="model"
    )
    final = {"kind": "final", "answer": '{"label": "billing_faq", "confidence": 0.8}'}
    assert classify(router(), final).label == "billing_faq"


def test_a_person_picks_a_label_or_is_asked_again():
    assert by_person(router(), '{"answer": "refund", "by": "op"}') == Routed(
        label="refund", confidence=None, by="person"
    )
    assert isinstance(by_person(router(), '{"answer": "something else"}'), AskPerson)


def test_the_output_is_the_fixed_branch_or_the_question_and_a_forged_branch_is_caught():
    spec = router(expected_label="billing_faq")
    decision = Routed(label="refund", confidence=0.9, by="model")
    call = output_of(spec, decision, goal="Refund order A.", step=1)
    assert call["tool"] == "delegate" and call["arguments"]["goal"] == "Refund order A."
    assert call["arguments"]["route"]["high_risk"] is True
    assert call["arguments"]["route"]["expected"] == "billing_faq"
    planner = spec.model_dump(mode="json")
    assert branch_problem(planner, DelegateInput.model_validate(call["arguments"])) is None
    wider = {**call["arguments"], "grants": [{"capability": "payments:refund"}]}
    assert branch_problem(planner, DelegateInput.model_validate(wider)) is not None
    unrouted = {k: v for k, v in call["arguments"].items() if k != "route"}
    assert branch_problem(planner, DelegateInput.model_validate(unrouted)) is not None
    assert branch_problem({"kind": "fixture"}, DelegateInput.model_validate(call["arguments"]))
    question = output_of(
        spec, AskPerson(reason="unknown", proposed=None, confidence=None), goal="g", step=1
    )
    assert question["kind"] == "clarify" and "billing_faq, refund" in question["question"]


def test_the_branch_answer_ends_the_router_run():
    content = (
        '<untrusted-data observation="job-1">\n'
        '{"output": {"answer": "Done.", "stop_reason": "FINAL_ANSWER_VALIDATED"}}\n'
        "</untrusted-data>"
    )
    assert final_of("job-1", content) == {
        "kind": "final",
        "answer": "Done.",
        "citations": ["job-1"],
    }
    failed = '{"output": {"answer": null, "stop_reason": "MAX_TOOL_CALLS_REACHED"}}'
    assert final_of("job-1", failed)["kind"] == "no_answer"


def test_unknown_is_no_label_and_the_fallback_must_be_one():
    with pytest.raises(ValueError):
        router(routes={"unknown": READER})
    with pytest.raises(ValueError):
        router(fallback="nowhere")
