"""Fuzzing the pure gate with hostile JSON (issue 35): depth around and far past the bound,
size (huge strings, many keys), odd Unicode (direction marks, zero-width, NUL, combining
marks, astral characters), extreme numbers (huge integers, 1e308, -0.0, NaN, Infinity) and
wrong types at every level, in the proposal and in the arguments of real tools (typed
resources included), with provenance sources to analyse. Whatever comes in, ``evaluate``
returns a decision (an accept, a refusal with a known code, a wait for a person or a stop)
and never raises. tests/integration/test_gate_properties.py checks what an accept implies."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gate import NOW, grant, run
from tests.unit.test_gate_hardening import FETCH, NOTE, SEND
from warrant.runner import policy
from warrant.runner.canonical import MAX_JSON_DEPTH, json_depth
from warrant.runner.codes import Rejection
from warrant.runner.gate import GateInput
from warrant.runner.views import ProvenanceSources
from warrant.tools._plugins import registry_for
from warrant.tools._registry import Registry

REGISTRY = Registry({(t.name, t.version): t for t in [*registry_for(), SEND, FETCH, NOTE]}.values())
KNOWN = {r.value for r in Rejection}
INVALID = re.compile(r"^INVALID_[A-Z0-9_]+$")
FIELDS = sorted({f for t in REGISTRY for f in t.input_model.model_fields} | {"reason_summary"})

ODD = [
    "\u202e",  # right-to-left override
    "\u200f",  # right-to-left mark
    "\u200b",  # zero-width space
    "\u200d",  # zero-width joiner
    "\ufeff",  # byte-order mark
    "\x00",
    "\x1b[31m",
    "e\u0301\u0301\u0301",  # combining marks
    "\U0001f600",
    "\U0010ffff",
    "\u0130",  # changes length when case-folded
    "\ufb03",
    "..",
    "/",
    "@",
    "%2F",
    "*",
]
odd_text = st.lists(
    st.sampled_from(ODD) | st.characters(exclude_categories=["Cs"]), max_size=8
).map("".join)
plausible = st.sampled_from(
    [
        "retries",
        "run-output/a.md",
        "../etc/passwd",
        "answer_language",
        "bob@corp.example",
        "eve@evil.example",
        "a@\U0001f600.example",
        "https://docs.example.com/guides",
        "https://ex\u200bample.com/",
        "https://\u202eexample.com/",
        "https://[::1]:99999/",
        "http://%zz/",
        "https://" + "a" * 300 + ".com/",
        "https://xn--.com/",
        "https://user@evil.example/",
        "Berlin",
    ]
)
EXTREME = [0, -0.0, 1e308, -1e308, 5e-324, 2**53, 2**53 + 1, -(2**63), 10**400]
numbers = (
    st.sampled_from([*EXTREME, float("nan"), float("inf"), float("-inf")])
    | st.integers()
    | st.floats()
)
huge = st.sampled_from(["x", "\U0001f600", "\u202e", "a\x00"]).flatmap(
    lambda c: st.integers(1, 60_000).map(lambda n: c * n)
)
many_keys = st.integers(1, 5_000).map(lambda n: {f"k{i}": i for i in range(n)})
leaves = st.none() | st.booleans() | numbers | odd_text | plausible | huge | many_keys


@st.composite
def deep(draw: st.DrawFn, inner: st.SearchStrategy[Any]) -> Any:
    """``inner`` wrapped in arrays or objects, around the bound and far past it."""
    depth = draw(
        st.sampled_from([MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, 990, 3_000])
        | st.integers(0, 100)
    )
    key = draw(st.sampled_from(["a", "", "query", "\u202e"]))
    as_list = draw(st.booleans())
    value = draw(inner)
    for _ in range(depth):
        value = [value] if as_list else {key: value}
    return value


values = st.recursive(
    leaves,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(odd_text | st.sampled_from(FIELDS), c),
    max_leaves=6,
)
hostile = values | deep(values)
arguments = hostile | st.dictionaries(st.sampled_from(FIELDS), hostile | plausible, max_size=4)
tools = st.sampled_from([t.name for t in REGISTRY]) | odd_text
proposals = hostile | st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["tool", "final", "Tool"]) | hostile,
        "proposal_id": st.sampled_from(["p1"]) | hostile,
        "tool": tools | hostile,
        "tool_version": st.sampled_from(["1", ""]) | hostile,
        "arguments": arguments,
    },
    optional={
        "reason_summary": odd_text | hostile,
        "source_observation_ids": st.lists(st.sampled_from(["tool-1", "user-1"])) | hostile,
        "capability": hostile,
    },
)
sources = st.none() | st.builds(
    ProvenanceSources,
    trusted=st.tuples(odd_text | plausible),
    untrusted=st.tuples(st.tuples(st.just("tool-1"), odd_text | plausible | huge)),
)


def _check(decision: Any) -> None:
    if isinstance(decision, policy.Reject):
        assert decision.code in KNOWN or INVALID.match(decision.code), decision.code
        assert decision.events[-1].name == "proposal.rejected"
    else:
        assert isinstance(
            decision, policy.Accept | policy.AwaitConfirmation | policy.Halt | policy.Ignore
        ), decision


@settings(
    max_examples=400,
    deadline=2_000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(raw=proposals, provenance=sources, granted=st.booleans())
def test_the_gate_decides_on_any_hostile_json_and_never_raises(raw, provenance, granted):
    view = run()
    capabilities = sorted({c for t in REGISTRY for c in t.capabilities})
    inp = GateInput(
        raw=raw,
        run=view,
        expected_version=view.version,
        grants=[grant(c) for c in capabilities] if granted else [grant("search:public")],
        confirmations=[],
        history=[],
        registry=REGISTRY,
        now=NOW,
        provenance=provenance,
    )
    decision = policy.evaluate(inp)
    _check(decision)
    if json_depth(raw) > MAX_JSON_DEPTH:
        assert isinstance(decision, policy.Reject) and decision.code == "PROPOSAL_TOO_DEEP"


def _deep_in_the_stack(frames: int, call: Any) -> Any:
    """``call()`` with ``frames`` frames of the stack already used (a worker's stack is not
    pytest's: the bound must leave room for whatever calls the gate)."""
    return call() if frames == 0 else _deep_in_the_stack(frames - 1, call)


def test_the_bound_leaves_room_on_a_deep_stack():
    """At the bound, a value in every field of every tool is decided with the stack already
    400 frames deep (of Python's default limit of 1,000), with provenance sources to walk."""
    view = run()
    for tool in REGISTRY:
        for field in [*tool.input_model.model_fields, "x"]:
            for leaf in ("bob@corp.example", 12345678):
                value: Any = leaf
                for i in range(MAX_JSON_DEPTH - 2):
                    value = [value] if i % 2 else {"a": value}
                raw = {
                    "kind": "tool",
                    "proposal_id": "p1",
                    "tool": tool.name,
                    "tool_version": tool.version,
                    "arguments": {field: value},
                }
                assert json_depth(raw) == MAX_JSON_DEPTH
                inp = GateInput(
                    raw=raw,
                    run=view,
                    expected_version=view.version,
                    grants=[grant(c) for c in tool.capabilities],
                    confirmations=[],
                    history=[],
                    registry=REGISTRY,
                    now=NOW,
                    provenance=ProvenanceSources(trusted=("x",), untrusted=(("t-1", "y"),)),
                )
                _check(_deep_in_the_stack(400, lambda inp=inp: policy.evaluate(inp)))
