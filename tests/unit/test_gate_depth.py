"""Proposals nested deeper than Python's recursion limit (issue 35): the gate refuses them with
``PROPOSAL_TOO_DEEP`` instead of raising ``RecursionError`` (which the policy worker turned into
``INTERNAL_ERROR``). The entries before the gate: tests/unit/test_deep_inputs.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gate import gate, proposal
from warrant.runner import policy
from warrant.runner.canonical import (
    MAX_JSON_DEPTH,
    json_depth,
    raw_fingerprint,
    stable_json,
)
from warrant.runner.views import HistoryEntry

DEPTHS = [990, 5_000, 100_000]


def nested(depth: int, kind: str = "list", leaf: Any = "x") -> Any:
    """``depth`` arrays (or objects) inside one another, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


def shapes(depth: int) -> dict[str, Any]:
    """Where a deep value may sit in what the planner stage hands the gate."""
    return {
        "arguments.list": proposal(arguments={"query": nested(depth)}),
        "arguments.object": proposal(arguments={"query": nested(depth, "object")}),
        "arguments": proposal(arguments=nested(depth, "object")),
        "tool": proposal(tool=nested(depth, "object")),
        "tool_version": proposal(tool_version=nested(depth)),
        "reason_summary": proposal(reason_summary=nested(depth)),
        "extra field": proposal(extra=nested(depth, "object")),
        "raw.list": nested(depth),
        "raw.object": nested(depth, "object"),
    }


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, *DEPTHS])
def test_a_proposal_nested_past_the_recursion_limit_is_refused_not_raised(depth):
    # Before: RecursionError from json.dumps, in _raw_fingerprint (depth 990, after the input
    # schema refused it) or in the input-size check of _validate_input (5,000 and more); at
    # any depth past the bound, from canonical JSON of a deep "tool" in raw_fingerprint.
    for where, raw in shapes(depth).items():
        decision = policy.evaluate(gate(raw))
        assert isinstance(decision, policy.Reject), where
        assert (decision.code, decision.layer) == ("PROPOSAL_TOO_DEEP", "parse"), where
        assert decision.events[-1].details["code"] == "PROPOSAL_TOO_DEEP"
        assert str(MAX_JSON_DEPTH) in (decision.message or "")
        assert (decision.fingerprint is None) == (not isinstance(raw, dict))


def test_the_bound_is_on_the_whole_output_the_proposal_counting_as_one_level():
    # the proposal is level 1 and its arguments object level 2
    at_the_limit = proposal(arguments={"query": nested(MAX_JSON_DEPTH - 2)})
    assert json_depth(at_the_limit) == MAX_JSON_DEPTH
    decision = policy.evaluate(gate(at_the_limit))
    assert isinstance(decision, policy.Reject) and decision.code == "INVALID_QUERY"
    one_more = proposal(arguments={"query": nested(MAX_JSON_DEPTH - 1)})
    assert policy.evaluate(gate(one_more)).code == "PROPOSAL_TOO_DEEP"
    assert policy.evaluate(gate(proposal())).__class__ is policy.Accept


def test_deep_refusals_repeated_without_news_still_stop_the_run():
    raw = proposal(arguments={"query": nested(5_000)})
    fp = raw_fingerprint(raw)
    assert fp is not None and fp == raw_fingerprint(proposal(arguments={"query": nested(5_000)}))
    assert fp != raw_fingerprint(proposal(arguments={"query": nested(5_000, leaf="y")}))
    history = [HistoryEntry(fingerprint=fp, observation_version=1)] * 5
    decision = policy.evaluate(gate(raw, history=history))
    assert isinstance(decision, policy.Halt)
    assert decision.reason.value == "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    assert decision.detail["last_code"] == "PROPOSAL_TOO_DEEP"


@pytest.mark.parametrize(
    ("value", "depth"),
    [("x", 0), (None, 0), ([], 1), ({}, 1), ([[1]], 2), ({"a": [{"b": 1}]}, 3), ((1, (2,)), 2)],
)
def test_json_depth_counts_arrays_and_objects(value, depth):
    assert json_depth(value) == depth


def test_json_depth_stops_past_its_limit_even_for_a_cycle():
    assert json_depth(nested(100_000)) == MAX_JSON_DEPTH + 1
    assert json_depth(nested(10), limit=3) == 4
    loop: list[Any] = []
    loop.append(loop)
    assert json_depth(loop) == MAX_JSON_DEPTH + 1
    assert stable_json(loop) == '["<cycle>"]'


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from(["\u202e", "\u200b", "\x00", "e\u0301", "\U0001f600"]),
    lambda c: (
        st.lists(c, max_size=3)
        | st.tuples(c, c)
        | st.dictionaries(st.text(max_size=3) | st.integers(-3, 3), c, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_stable_json_is_json_dumps_without_its_recursion(value):
    """The fallback fingerprint keeps its bytes: the same text as before for every value."""
    try:
        expected = json.dumps(value, sort_keys=True, default=str)
    except TypeError:  # int and str keys in one object: json.dumps cannot sort them
        return
    assert stable_json(value) == expected


def test_stable_json_writes_any_depth():
    assert stable_json(nested(100_000)) == "[" * 100_000 + '"x"' + "]" * 100_000
