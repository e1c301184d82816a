"""The trace's hash chain, in Python: the same canonical text and hash as the database's
``warrant_trace_hash`` (migration 0018), the check of one run's chain, and prune anchors.

Pure (``hashlib`` only). What is chained: every ``trace_records`` row — each transition's
events, among them every decision and outcome the run records (``proposal.*``, ``policy.*``,
``confirmation.*``, ``tool.*``, ``state.transitioned``, …). The mutable rows those events
describe (``runs``, ``proposals``, ``commands``, ``outcomes``) are not chained: their status
changes in place; the trace is their history.

A row's hash is ``sha256`` of, joined by newlines: ``warrant-trace-v1``, ``prev_hash``,
``run_id``, ``seq``, ``step``, ``p:<proposal_id>`` or an empty line, ``created_at`` in UTC as
``YYYY-MM-DDTHH:MM:SS.ffffff``, and the events as PostgreSQL prints ``jsonb``
(:func:`jsonb_text` reproduces that for values read back as Python objects). The chain has no
key: it shows an edit, a deletion or a reordering by someone who does not also recompute every
later hash; keep the heads (``warrant ledger verify --json``) or the prune anchors elsewhere
to bind them too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

__all__ = [
    "GENESIS",
    "Break",
    "ChainRow",
    "Head",
    "anchor_hash",
    "check_run",
    "jsonb_text",
    "record_hash",
]

#: ``prev_hash`` of a run's first record.
GENESIS = "0" * 64

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _string(value: str) -> str:
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _number(value: float) -> str:
    """A float as PostgreSQL prints the ``numeric`` it parsed from Python's JSON for it."""
    text = format(Decimal(repr(value)), "f")
    return text[1:] if text.startswith("-") and Decimal(text) == 0 else text


def jsonb_text(value: Any) -> str:
    """``value`` as ``jsonb::text`` prints it: keys by length then bytes, ``", "`` and
    ``": "``, numbers as ``numeric``, strings escaped as PostgreSQL does."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(jsonb_text(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{_string(k)}: {jsonb_text(value[k])}" for k in keys) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def record_hash(
    prev_hash: str,
    run_id: str,
    seq: int,
    step: int,
    proposal_id: str | None,
    created_at: datetime,
    events_text: str,
) -> str:
    """The hash ``warrant_trace_hash`` computes for these values (``events_text``: the
    events as ``jsonb::text``)."""
    stamp = created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    parts = (
        "warrant-trace-v1",
        prev_hash,
        run_id,
        str(seq),
        str(step),
        "" if proposal_id is None else "p:" + proposal_id,
        stamp,
        events_text,
    )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class ChainRow:
    """One ``trace_records`` row as :func:`check_run` reads it."""

    seq: int
    step: int
    proposal_id: str | None
    created_at: datetime
    events_text: str
    n_events: int
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class Break:
    """The first broken link of a run: ``kind`` is ``edited`` (a row's content no longer
    gives its hash), ``deleted`` (a record is missing: a gap, or the chain's predecessor is
    gone), ``reordered`` (rows in ``seq`` order do not follow the chain), ``inserted`` (a
    row no chain link leads to)."""

    run_id: str
    seq: int
    kind: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seq": self.seq, "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True)
class Head:
    """The end of an intact chain: the last event number and the last record's hash."""

    run_id: str
    last_seq: int
    hash: str
    records: int


def check_run(run_id: str, rows: Sequence[ChainRow], allocated: int | None = None) -> Break | Head:
    """Walk ``rows`` (in ``seq`` order) and return the first broken link, or the head.
    ``allocated`` is the run's ``trace_seq`` (the last event number it handed out): records
    missing at the end show against it."""
    prev, expected = GENESIS, 1
    hashes = {r.hash for r in rows}
    for i, r in enumerate(rows):
        if r.prev_hash != prev:
            if i >= 2 and r.prev_hash == rows[i - 2].hash:
                return Break(run_id, rows[i - 1].seq, "inserted", "no chain link leads to it")
            if r.prev_hash in hashes:
                return Break(run_id, r.seq, "reordered", "its chain predecessor is elsewhere")
            return Break(run_id, r.seq, "deleted", "its chain predecessor is missing")
        found = record_hash(
            r.prev_hash, run_id, r.seq, r.step, r.proposal_id, r.created_at, r.events_text
        )
        if found != r.hash:
            return Break(run_id, r.seq, "edited", "its content does not give its hash")
        if r.seq != expected:
            return Break(run_id, r.seq, "deleted", f"events {expected}..{r.seq - 1} missing")
        prev, expected = r.hash, r.seq + r.n_events
    if allocated is not None and expected - 1 != allocated:
        if expected - 1 < allocated:
            what = f"events {expected}..{allocated} missing at the end"
            return Break(run_id, expected, "deleted", what)
        return Break(run_id, expected - 1, "edited", f"the run handed out {allocated} events")
    return Head(run_id, expected - 1, prev, len(rows))


def anchor_hash(heads: Sequence[Sequence[Any]]) -> str:
    """The hash over a prune batch's heads (``[run_id, last_seq, final_hash]``, any order)."""
    lines = sorted(f"{h[0]} {h[1]} {h[2]}" for h in heads)
    return hashlib.sha256("\n".join(["warrant-anchor-v1", *lines]).encode()).hexdigest()
