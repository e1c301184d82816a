from __future__ import annotations

import pytest
from warrant_demo.scenarios import SCENARIOS, spec

from warrant.runner.costs import deadline_fit
from warrant.runner.errors import SpecError
from warrant.runner.spec import parse_run_spec


def test_every_scenario_spec_is_valid():
    for scenario in SCENARIOS:
        assert parse_run_spec(scenario["spec"]).goal


def test_json_text_is_accepted():
    import json

    assert parse_run_spec(json.dumps(spec([]))).subject == "demo-user"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda s: s.pop("goal"), "goal"),
        (lambda s: s.update(goal=""), "goal"),
        (lambda s: s["budgets"].update(max_tool_calls=-1), "budgets.max_tool_calls"),
        (lambda s: s["budgets"].update(deadline_s=0), "budgets.deadline_s"),
        (lambda s: s.update(planner={"kind": "Oracle!"}), "planner"),
        (lambda s: s.update(planner={"kind": "fixture"}), "planner.fixture.outputs"),
        (lambda s: s.update(extra=1), "extra"),
        (lambda s: s["grants"].append({"capability": ""}), "grants.1.capability"),
    ],
)
def test_bad_specs_name_the_field(mutate, field):
    data = spec([])
    mutate(data)
    with pytest.raises(SpecError) as caught:
        parse_run_spec(data)
    assert any(e["field"].startswith(field) for e in caught.value.errors), caught.value.errors
    assert caught.value.to_dict()["code"] == "SPEC_INVALID"


def test_malformed_planner_outputs_are_allowed_in_the_spec():
    # Untrusted outputs are the gate's business, not the spec's.
    assert parse_run_spec(spec([{"kind": "tool", "arguments": "nope"}, {"junk": True}]))


def test_an_unregistered_planner_kind_is_refused_at_start_naming_the_field():
    from warrant.runner.planners.kinds import check_planner

    data = spec([])
    data["planner"] = {"kind": "oracle", "settings": {"x": 1}}
    parsed = parse_run_spec(data)  # well-formed: a plug-in kind
    with pytest.raises(SpecError) as caught:
        check_planner(parsed, {})
    assert caught.value.errors[0]["field"] == "planner.kind"


def test_the_idempotency_hash_ignores_fields_at_their_default():
    from warrant.runner.client.idempotency import spec_hash
    from warrant.runner.spec import parse_run_spec

    base = {"goal": "g", "subject": "s", "planner": {"kind": "fixture", "outputs": []}}
    explicit = {**base, "budgets": {"unpriced_calls_free": False}, "success": None}
    assert spec_hash(parse_run_spec(base)) == spec_hash(parse_run_spec(explicit))
    other = {**base, "budgets": {"max_steps": 3}}
    assert spec_hash(parse_run_spec(base)) != spec_hash(parse_run_spec(other))


def _openai_spec(*, timeout_s: float, deadline_s: float, max_model_calls: int = 8) -> dict:
    return {
        "goal": "g",
        "subject": "u",
        "planner": {
            "kind": "openai",
            "model": "m",
            "base_url": "http://127.0.0.1:1/v1",
            "timeout_s": timeout_s,
        },
        "budgets": {"deadline_s": deadline_s, "max_model_calls": max_model_calls},
    }


def test_a_model_timeout_longer_than_the_whole_deadline_is_refused_naming_the_numbers():
    with pytest.raises(SpecError) as raised:
        deadline_fit(parse_run_spec(_openai_spec(timeout_s=30, deadline_s=10)))
    assert raised.value.code == "SPEC_INVALID"
    assert "planner.timeout_s 30 s" in str(raised.value)
    assert "budgets.deadline_s 10 s" in str(raised.value)
    assert raised.value.errors[0]["field"] == "planner.timeout_s"


def test_a_router_classifier_timeout_longer_than_the_deadline_is_refused():
    data = _openai_spec(timeout_s=30, deadline_s=10)
    classifier = data["planner"]
    data["planner"] = {
        "kind": "router",
        "classifier": classifier,
        "routes": {"billing": {"planner": {"kind": "fixture", "outputs": []}}},
    }
    with pytest.raises(SpecError) as raised:
        deadline_fit(parse_run_spec(data))
    assert raised.value.errors[0]["field"] == "planner.classifier.timeout_s"


def test_a_worst_case_past_the_deadline_is_a_warning_not_a_refusal():
    warning = deadline_fit(parse_run_spec(_openai_spec(timeout_s=30, deadline_s=60)))
    assert warning == {
        "warning": "worst_case_past_deadline",
        "max_model_calls": 8,
        "timeout_s": 30,
        "worst_case_s": 240,
        "deadline_s": 60,
    }
    fits = _openai_spec(timeout_s=5, deadline_s=60, max_model_calls=12)
    assert deadline_fit(parse_run_spec(fits)) is None
    assert deadline_fit(parse_run_spec(_openai_spec(timeout_s=60, deadline_s=60))) is not None
    assert deadline_fit(parse_run_spec(spec([]))) is None  # a fixture planner sets no timeout
