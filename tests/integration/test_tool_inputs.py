"""Tool inputs that fit JSON: Enum, Literal, datetime, date, UUID, Decimal and 64-bit ints are
read from their JSON forms (strictly: ``"1"`` is still not an integer) and hashed exactly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import typed_tool
from tests.gate import gate, grant, proposal
from warrant.runner import policy
from warrant.runner.canonical import canonical_json, proposal_hash
from warrant.tools._plugins import DEMO_PLUGIN, _cached

TOOLS = f"{DEMO_PLUGIN},{typed_tool.REF}"

GOOD: dict[str, Any] = {
    "color": "red",
    "mode": "fast",
    "at": "2026-01-01T12:30:00Z",
    "day": "2026-01-01",
    "ref": "12345678-1234-5678-1234-567812345678",
    "amount": "12.50",
    "n": 7,
}


@pytest.fixture
def typed_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pytest process sees the typed tool next to the demo tools."""
    monkeypatch.setenv("WARRANT_TOOLS", TOOLS)
    monkeypatch.setenv("WARRANT_PLUGIN_ENTRY_POINTS", "0")  # only these tools
    _cached.cache_clear()
    yield
    _cached.cache_clear()


def typed(**arguments: Any) -> dict[str, Any]:
    return proposal(typed_tool.TOOL.name, {**GOOD, **arguments})


def decide(raw: Any) -> policy.Decision:
    return policy.evaluate(gate(raw, grants=[grant("typed:read")]))


def accepted(raw: Any) -> policy.Accept:
    d = decide(raw)
    assert isinstance(d, policy.Accept), d
    return d


def test_parse_input_reads_the_json_forms() -> None:
    args = typed_tool.TOOL.parse_input(GOOD)
    assert args.color is typed_tool.Color.RED
    assert args.at.isoformat() == "2026-01-01T12:30:00+00:00"
    assert str(args.day) == "2026-01-01" and str(args.amount) == "12.50"
    assert args.ref == uuid.UUID(GOOD["ref"])
    # the normalized JSON form reads back as the same value
    again = typed_tool.TOOL.parse_input(args.model_dump(mode="json"))
    assert again == args


@pytest.mark.usefixtures("typed_registry")
def test_the_gate_accepts_the_json_forms() -> None:
    d = accepted(typed())
    assert d.arguments == {**GOOD, "at": "2026-01-01T12:30:00Z"}
    assert d.resource == "*"


@pytest.mark.usefixtures("typed_registry")
@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"n": "1"}, "INVALID_N"),  # no coercion from a string
        ({"n": 1.0}, "INVALID_N"),
        ({"n": True}, "INVALID_N"),
        ({"color": "blue"}, "INVALID_COLOR"),
        ({"color": "RED"}, "INVALID_COLOR"),  # values, not names
        ({"mode": "medium"}, "INVALID_MODE"),
        ({"day": "2026-13-01"}, "INVALID_DAY"),
        ({"day": "yesterday"}, "INVALID_DAY"),
        ({"at": "2026-01-01 25:00"}, "INVALID_AT"),
        ({"at": [2026, 1, 1]}, "INVALID_AT"),
        ({"ref": "not-a-uuid"}, "INVALID_REF"),
        ({"amount": "a lot"}, "INVALID_AMOUNT"),
        ({"extra": 1}, "UNKNOWN_INPUT_FIELD"),
    ],
)
def test_the_gate_refuses_what_is_not_the_json_form(arguments: dict[str, Any], code: str) -> None:
    d = decide(typed(**arguments))
    assert isinstance(d, policy.Reject), d
    assert d.code == code


@pytest.mark.usefixtures("typed_registry")
def test_a_missing_field_is_invalid() -> None:
    args = {k: v for k, v in GOOD.items() if k != "day"}
    d = decide(proposal(typed_tool.TOOL.name, args))
    assert isinstance(d, policy.Reject) and d.code == "INVALID_DAY"


@pytest.mark.usefixtures("typed_registry")
@pytest.mark.parametrize("n", [2**62, -(2**63), 2**63 - 1, 2**53, -(2**53)])
def test_64_bit_integers_are_accepted_and_hashed_exactly(n: int) -> None:
    d = accepted(typed(n=n))
    assert d.arguments["n"] == n
    assert canonical_json(d.arguments).count(str(n).encode()) == 1
    same = accepted(typed(n=n))
    other = accepted(typed(n=n + 1))
    assert (same.arguments_hash, same.proposal_hash) == (d.arguments_hash, d.proposal_hash)
    assert other.arguments_hash != d.arguments_hash
    assert other.proposal_hash != d.proposal_hash


def test_canonical_json_writes_big_integers_as_digits() -> None:
    value = {"b": [2**63, {"é": 1, "a": -(2**63)}], "a": "x", "\U0001f600": 1.5, "\uff61": None}
    assert (
        canonical_json(value)
        == (
            '{"a":"x","b":[9223372036854775808,{"a":-9223372036854775808,"é":1}],'
            '"\U0001f600":1.5,"\uff61":null}'
        ).encode()
    )
    # inside the safe range nothing changes
    assert canonical_json({"n": 2**53 - 1}) == b'{"n":9007199254740991}'


def test_canonical_json_still_refuses_what_is_not_json() -> None:
    import rfc8785

    for bad in ({"n": 2**64, "f": float("nan")}, {1: 2**64}, {"x": [2**64, object()]}):
        with pytest.raises(rfc8785.CanonicalizationError):
            canonical_json(bad)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.sampled_from([2**53, -(2**53), 2**63 - 1, -(2**63)])
    | st.text()
)


def _nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )


_json_values = _nested(_scalars | st.floats(allow_nan=False, allow_infinity=False))


@given(
    tool=st.text(),
    version=st.text(),
    arguments=st.dictionaries(st.text(), _json_values, max_size=5),
)
def test_proposal_hash_composition_holds_with_big_integers(
    tool: str, version: str, arguments: dict[str, object]
) -> None:
    """The gate reuses the arguments' canonical bytes; big integers keep that property."""
    assert proposal_hash(
        tool, version, arguments, canonical_arguments=canonical_json(arguments)
    ) == proposal_hash(tool, version, arguments)


@given(arguments=st.dictionaries(st.text(), _nested(_scalars), max_size=5))
def test_canonical_json_is_json_and_keeps_integers_exact(arguments: dict[str, object]) -> None:
    """(Floats are left out: RFC 8785 writes 1e16 as ``10000000000000000``.)"""
    import json

    assert json.loads(canonical_json(arguments)) == arguments


# --- end to end, through real workers --------------------------------------------------------


@pytest.mark.services
@pytest.mark.slow
def test_a_typed_tool_receives_python_objects_through_the_workers(
    client: Any, worker: Any, engine: Any
) -> None:
    # the test deployment (tests/conftest.py) names tests.typed_tool:plugin in WARRANT_TOOLS
    from warrant_demo import scenarios as sc

    from warrant.ledger.db import session_scope
    from warrant.ledger.models import Observation, OutcomeRow

    big = -(2**63)
    call = typed(n=big)
    spec = sc.spec([call, sc.final("echoed", "tool-1")], grants=[{"capability": "typed:read"}])
    run_id = client.start_run(spec)
    info = client.wait(run_id, timeout=60)
    assert (info.status, info.tool_calls) == ("completed", 1), info
    with session_scope(engine) as s:
        outcome = s.query(OutcomeRow).filter_by(run_id=run_id).one()
        observations = s.query(Observation).filter_by(run_id=run_id).all()
        assert outcome.status == "succeeded", (outcome.code, outcome.message)
        output = dict(outcome.output or {})
        contents = [o.content for o in observations]
    assert output["types"] == {
        "color": "Color",
        "mode": "str",
        "at": "datetime",
        "day": "date",
        "ref": "UUID",
        "amount": "Decimal",
        "n": "int",
    }
    assert output["n"] == big and output["amount"] == "12.50"  # exact through ledger and queue
    assert any(output["types"] == _find_types(c) for c in contents), contents


def _find_types(content: Any) -> Any:
    """The echoed ``types`` inside an observation's content, wherever it is nested."""
    if isinstance(content, dict):
        if "types" in content:
            return content["types"]
        for value in content.values():
            found = _find_types(value)
            if found is not None:
                return found
    return None
