"""JSON for the ledger's connections: orjson, and the standard library where they differ.

psycopg encodes every JSON parameter and decodes every JSON column with these (the engines
pass them as SQLAlchemy's ``json_serializer`` / ``json_deserializer``); a stage binds and reads
several JSON documents per statement, and the standard library spent about a quarter of a
stage's own CPU on them. The results are the standard library's:

* encoding: what orjson refuses (integers beyond 64 bits, anything that is not plain JSON data
  — ``datetime`` and dataclasses are passed through to refuse them, as ``json.dumps`` does) is
  encoded by ``json.dumps``; keys that are not strings are converted as ``json.dumps`` converts
  them. One difference is kept: NaN and infinities become ``null`` (``json.dumps`` writes
  ``NaN``, which PostgreSQL rejects).
* decoding: a document with a run of 20 or more digits (an integer orjson would turn into a
  float) is decoded by ``json.loads``, which keeps it exact.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["dumps", "loads"]

_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)
_LONG_NUMBER = re.compile(rb"\d{20}")


def dumps(value: Any) -> bytes | str:
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except TypeError:
        return json.dumps(value)


def loads(data: bytes | str) -> Any:
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_NUMBER.search(raw):
        return json.loads(raw)
    return orjson.loads(raw)
