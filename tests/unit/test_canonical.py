from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from warrant.runner.canonical import (
    arguments_hash,
    canonical_json,
    idempotency_token,
    proposal_hash,
)


def test_key_order_does_not_change_identity():
    a = {"z": {"b": 2, "a": 1}, "a": [{"d": 4, "c": 3}]}
    b = {"a": [{"c": 3, "d": 4}], "z": {"a": 1, "b": 2}}
    assert canonical_json(a) == canonical_json(b)
    assert arguments_hash(a) == arguments_hash(b)


def test_array_order_does_change_identity():
    assert arguments_hash({"v": [1, 2]}) != arguments_hash({"v": [2, 1]})


def test_proposal_hash_binds_tool_version_and_arguments():
    base = proposal_hash("save_preference", "1", {"key": "answer_language", "value": "zh"})
    assert base != proposal_hash("save_preference", "2", {"key": "answer_language", "value": "zh"})
    assert base != proposal_hash("save_preference", "1", {"key": "answer_language", "value": "en"})
    assert len(base) == 64


def test_idempotency_token_is_stable():
    h = arguments_hash({"x": 1})
    assert idempotency_token("r", "p", "1", h) == idempotency_token("r", "p", "1", h)
    assert idempotency_token("r", "p", "1", h) != idempotency_token("r", "p2", "1", h)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(
    tool=st.text(),
    version=st.text(),
    arguments=st.dictionaries(st.text(), _json_values, max_size=5),
)
def test_proposal_hash_from_the_arguments_canonical_bytes_is_the_same(
    tool: str, version: str, arguments: dict[str, object]
) -> None:
    """The policy gate reuses the arguments' canonical bytes (computed for their own hash)."""
    assert proposal_hash(
        tool, version, arguments, canonical_arguments=canonical_json(arguments)
    ) == proposal_hash(tool, version, arguments)
