"""Callers' keys of proposals (issue 50): what a key names, and when the same key again is the
same call (pure rules of :mod:`warrant.runner.external`)."""

from __future__ import annotations

import pytest

from warrant.runner.errors import InvalidRequest, StateConflict
from warrant.runner.external import call_digest, caller_keys, replayed_key, without_call_ids


def tool(order: str, pid: str = "p1", **extra: object) -> dict[str, object]:
    arguments = {"order_id": order, "amount_cents": 500, "currency": "EUR"}
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "issue_refund",
        "tool_version": "1",
        "arguments": arguments,
        **extra,
    }


def parallel(*calls: dict[str, object]) -> dict[str, object]:
    return {"kind": "parallel", "proposal_id": "set", "calls": list(calls)}


def test_the_digest_is_what_the_call_does_not_what_it_is_called():
    assert call_digest(tool("ord_1", "p1")) == call_digest(tool("ord_1", "p2"))
    assert call_digest(tool("ord_1")) != call_digest(tool("ord_2"))
    member = tool("ord_1", "other", call_id="k1")
    assert call_digest(member) == call_digest(tool("ord_1"))  # one call of a set, or alone


def test_keys_of_a_proposal_and_of_a_parallel_ones_calls():
    [one] = caller_keys(tool("ord_1"), "k")
    assert (one.key, one.branch) == ("k", 0)
    keys = caller_keys(parallel(tool("ord_1", call_id="a"), tool("ord_2", call_id="b")), None)
    assert [(k.key, k.branch) for k in keys] == [("a", 1), ("b", 2)]
    assert caller_keys(tool("ord_1"), None) == []
    recorded = without_call_ids(parallel(tool("ord_1", call_id="a")))
    assert "call_id" not in recorded["calls"][0]


@pytest.mark.parametrize("bad", ["", "x" * 201, "tab\there"])
def test_a_bad_key_is_refused_with_a_code(bad):
    with pytest.raises(InvalidRequest) as caught:
        caller_keys(tool("ord_1"), bad)
    assert caught.value.code == "CALL_ID_INVALID"


def test_one_key_names_one_call():
    with pytest.raises(InvalidRequest) as caught:
        caller_keys(parallel(tool("ord_1", call_id="a"), tool("ord_2", call_id="a")), None)
    assert caught.value.code == "CALL_ID_INVALID"


def test_the_same_key_and_call_is_the_earlier_step_another_call_is_refused():
    keys = caller_keys(tool("ord_1", "retry"), "k")
    known = {"k": (4, 0, keys[0].digest)}
    assert replayed_key(known, keys) == (4, 0)
    other = caller_keys(tool("ord_2"), "k")
    with pytest.raises(StateConflict) as caught:
        replayed_key(known, other)
    assert caught.value.code == "IDEMPOTENCY_KEY_REUSED"


def test_one_call_of_an_earlier_set_sent_alone_is_its_branch():
    [alone] = caller_keys(tool("ord_2"), "b")
    assert replayed_key({"b": (7, 2, alone.digest)}, [alone]) == (7, 2)


def test_a_set_sent_again_is_its_step_a_set_naming_part_of_one_is_refused():
    again = caller_keys(parallel(tool("ord_1", call_id="a"), tool("ord_2", call_id="b")), None)
    known = {k.key: (3, k.branch, k.digest) for k in again}
    assert replayed_key(known, again) == (3, 0)
    mixed = caller_keys(parallel(tool("ord_1", call_id="a"), tool("ord_3", call_id="c")), None)
    with pytest.raises(StateConflict) as caught:
        replayed_key({"a": known["a"]}, mixed)
    assert caught.value.code == "IDEMPOTENCY_KEY_REUSED"
