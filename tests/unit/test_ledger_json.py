"""The ledger's JSON codec gives the standard library's results, faster (warrant.ledger.db)."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from enum import StrEnum

import pytest

from warrant.ledger import db as _json


class Colour(StrEnum):
    RED = "red"


def _as_text(data: bytes | str) -> str:
    return data.decode() if isinstance(data, bytes) else data


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": [1.5, -2, None, True, False], "c": {"d": 'é ✓ \u2028 "q" \\'}},
        {"code": Colour.RED, "list": (1, 2)},
        {3: "int key", 2.5: "float key", True: "bool key", None: "none key"},
        [0.1, 1e-7, 123456789.123, -0.0],
        "plain",
        [],
        {},
    ],
)
def test_encoding_decodes_to_what_the_standard_library_encodes(value: object) -> None:
    assert json.loads(_as_text(_json.dumps(value))) == json.loads(json.dumps(value))


def test_integers_beyond_64_bits_stay_exact_both_ways() -> None:
    big = {"id": 2**70, "neg": -(2**65)}
    encoded = _as_text(_json.dumps(big))
    assert json.loads(encoded) == big
    assert _json.loads(encoded.encode()) == big
    assert _json.loads(encoded) == big
    assert isinstance(_json.loads(b'{"n": 123456789012345678901234}')["n"], int)


def test_what_json_dumps_refuses_is_refused() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    for value in (datetime.now(UTC), Point(1), {1, 2}, object()):
        with pytest.raises(TypeError):
            _json.dumps({"v": value})


def test_nan_and_infinity_become_null() -> None:
    assert json.loads(_as_text(_json.dumps([math.nan, math.inf]))) == [None, None]


def test_decoding_matches_the_standard_library() -> None:
    text = '{"a": [1, 2.25, "x\\u00e9", null, true], "b": {"c": -1e-3}}'
    assert _json.loads(text.encode()) == json.loads(text)
    assert _json.loads(text) == json.loads(text)
