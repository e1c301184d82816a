"""A run spec's success conditions (what done means), checked purely on ledger facts: the
declaration's validation, each condition kind both ways, several conditions, and the stop and
observation a refused final answer gets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from warrant_demo.scenarios import spec

from warrant.runner.codes import RunStatus, StopReason
from warrant.runner.errors import SpecError
from warrant.runner.spec import SuccessSpec, parse_run_spec
from warrant.runner.step_decisions import (
    CompletionFacts,
    SucceededCall,
    check_success,
    check_success_spec,
    refusal_observation,
    same_json,
    success_stop,
    unverified_successes,
)
from warrant.tools._builtin import BUILTIN_TOOLS
from warrant.tools._registry import Registry

WRITE = {
    "kind": "tool_succeeded",
    "tool": "write_artifact",
    "arguments": {"path": "run-output/report.md"},
}
ARTIFACT = {"kind": "artifact_exists", "path": "run-output/report.md"}


def success(*conditions: dict) -> SuccessSpec:
    return SuccessSpec.model_validate({"all_of": list(conditions)})


def call(tool: str = "write_artifact", version: str = "1", step: int = 1, **arguments):
    return SucceededCall(tool, version, arguments, step)


def facts(*calls: SucceededCall, paths: tuple[str, ...] = ()) -> CompletionFacts:
    return CompletionFacts(succeeded_calls=calls, artifact_paths=frozenset(paths))


def whys(declared: SuccessSpec, seen: CompletionFacts) -> list[tuple[int, str]]:
    return [(u.index, u.why) for u in check_success(declared, seen)]


def test_no_declaration_means_a_cited_final_is_done():
    assert check_success(None, facts()) == []
    assert parse_run_spec(spec([])).success is None


def test_tool_succeeded_without_arguments_needs_only_a_succeeded_call_of_that_tool():
    declared = success({"kind": "tool_succeeded", "tool": "write_artifact"})
    assert whys(declared, facts()) == [(0, "no_succeeded_call")]
    assert whys(declared, facts(call("search_public", query="x"))) == [(0, "no_succeeded_call")]
    assert whys(declared, facts(call(path="run-output/other.md", content="x"))) == []


def test_tool_succeeded_with_arguments_matches_the_listed_fields_exactly():
    declared = success(WRITE)
    other = call(path="run-output/other.md", content="x")
    assert whys(declared, facts(other)) == [(0, "arguments_differ")]
    right = call(step=2, path="run-output/report.md", content="anything")
    assert whys(declared, facts(other, right)) == []
    # a field the call lacks never matches, not even a null
    needs_null = success({**WRITE, "arguments": {"missing": None}})
    assert whys(needs_null, facts(right)) == [(0, "arguments_differ")]


def test_tool_version_when_given_must_match():
    declared = success({**WRITE, "tool_version": "2"})
    assert whys(declared, facts(call(path="run-output/report.md"))) == [(0, "no_succeeded_call")]
    assert whys(declared, facts(call(version="2", path="run-output/report.md"))) == []


def test_json_equality_keeps_booleans_apart_from_numbers():
    assert same_json(1, 1.0) and same_json({"a": [1, "x"]}, {"a": [1.0, "x"]})
    assert not same_json(True, 1) and not same_json(0, False) and not same_json("1", 1)
    assert not same_json(None, "") and same_json(None, None)
    assert not same_json({"a": 1}, {"a": 1, "b": 2}) and not same_json([1], [1, 1])
    amount = success({"kind": "tool_succeeded", "tool": "issue_refund", "arguments": {"n": 1}})
    assert whys(amount, facts(call("issue_refund", n=True))) == [(0, "arguments_differ")]
    assert whys(amount, facts(call("issue_refund", n=1.0))) == []


def test_artifact_exists_reads_the_stores_paths_normalised():
    declared = success(ARTIFACT)
    assert whys(declared, facts()) == [(0, "no_artifact")]
    assert whys(declared, facts(paths=("run-output/other.md",))) == [(0, "no_artifact")]
    assert whys(declared, facts(paths=("run-output//./report.md",))) == []
    # a succeeded write is no artifact by itself: the store decides
    assert whys(declared, facts(call(path="run-output/report.md"))) == [(0, "no_artifact")]


def test_every_condition_must_hold_and_each_unmet_one_is_named():
    declared = success(WRITE, ARTIFACT, {"kind": "tool_succeeded", "tool": "search_public"})
    searched = call("search_public", step=1, query="q")
    assert whys(declared, facts(searched)) == [(0, "no_succeeded_call"), (1, "no_artifact")]
    written = call(step=2, path="run-output/report.md", content="x")
    assert whys(declared, facts(searched, written)) == [(1, "no_artifact")]
    assert whys(declared, facts(searched, written, paths=("run-output/report.md",))) == []


def test_the_stop_detail_names_no_values_and_the_observation_shows_the_condition():
    declared = success(WRITE, ARTIFACT)
    unmet = check_success(declared, facts())
    stop = success_stop(declared, unmet)
    assert (stop.status, stop.reason) == (RunStatus.FAILED, StopReason.SUCCESS_CONDITION_NOT_MET)
    assert stop.detail == {
        "conditions": 2,
        "unmet": [
            {
                "index": 0,
                "kind": "tool_succeeded",
                "why": "no_succeeded_call",
                "tool": "write_artifact",
            },
            {"index": 1, "kind": "artifact_exists", "why": "no_artifact"},
        ],
    }
    assert "run-output" not in repr(stop.detail)  # argument values and paths stay out of traces
    shown = refusal_observation(unmet)
    assert [u["condition"] for u in shown["unmet"]] == [WRITE, ARTIFACT]
    assert shown["reason"]


@pytest.mark.parametrize(
    ("declared", "field"),
    [
        ({"all_of": []}, "success.all_of"),
        ({"all_of": [{"kind": "tool_succeeded"}]}, "success.all_of.0.tool_succeeded.tool"),
        ({"all_of": [{"kind": "artifact_exists", "path": "/etc/x"}]}, "success.all_of.0"),
        ({"all_of": [{"kind": "artifact_exists", "path": "run-output/../x"}]}, "success.all_of.0"),
        ({"all_of": [{"kind": "answer_is", "text": "x"}]}, "success.all_of.0"),
        ({"any_of": [WRITE]}, "success.any_of"),
    ],
)
def test_a_bad_declaration_is_spec_invalid_naming_the_field(declared, field):
    data = {**spec([]), "success": declared}
    with pytest.raises(SpecError) as caught:
        parse_run_spec(data)
    assert any(e["field"].startswith(field) for e in caught.value.errors), caught.value.errors


def test_at_start_the_registry_must_know_the_tool_its_version_and_its_arguments():
    registry = Registry(BUILTIN_TOOLS)

    def check(condition: dict) -> None:
        data = {**spec([]), "success": {"all_of": [condition]}}
        check_success_spec(parse_run_spec(data), registry)

    check(WRITE)
    check(ARTIFACT)
    for bad, field, words in (
        ({"kind": "tool_succeeded", "tool": "shell"}, "success.all_of.0.tool", "no tool shell"),
        ({**WRITE, "tool_version": "9"}, "success.all_of.0.tool", "write_artifact@9"),
        ({**WRITE, "arguments": {"filename": "x"}}, "success.all_of.0.arguments", "filename"),
    ):
        with pytest.raises(SpecError) as caught:
            check(bad)
        assert caught.value.errors[0]["field"] == field, caught.value.errors
        assert words in str(caught.value)
        assert caught.value.to_dict()["code"] == "SPEC_INVALID"


def test_every_stop_reason_is_in_the_docs_table():
    page = (Path(__file__).parents[2] / "docs" / "using-it.md").read_text()
    section = page[page.index("## Stop reasons") : page.index("## Rejection codes")]
    listed = set(re.findall(r"`([A-Z_]+)`", section))
    assert {r.value for r in StopReason} <= listed, {r.value for r in StopReason} - listed


def test_an_unverified_writes_success_passes_flagged_unless_the_condition_asks_verified():
    """A ``tool_succeeded`` condition met only by an ``unverified`` write's word holds, and
    is flagged ``verified: false``; one that says ``verified: true`` does not hold then."""
    import dataclasses

    declared = success({"kind": "tool_succeeded", "tool": "send_notice"}, ARTIFACT)
    unverified = dataclasses.replace(call("send_notice", to="x"), verified=False)
    seen = facts(unverified, paths=("run-output/report.md",))
    assert whys(declared, seen) == []
    assert unverified_successes(declared, seen) == [
        {"index": 0, "tool": "send_notice", "verified": False}
    ]
    checked = facts(unverified, call("send_notice", step=2, to="x"))
    assert unverified_successes(declared, checked) == []  # one matching call was read back
    strict = success({"kind": "tool_succeeded", "tool": "send_notice", "verified": True})
    assert whys(strict, seen) == [(0, "unverified_only")]
    assert whys(strict, checked) == []
    assert unverified_successes(None, seen) == []
