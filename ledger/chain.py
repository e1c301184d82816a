"""The trace's hash chain, in Python: the same canonical text and hash as the database's
``warrant_trace_hash`` (migration 0018), the check of one run's chain, and prune anchors.

Pure. What is chained: every ``trace_records`` row — each transition's events, among them
every decision and outcome the run records (``proposal.*``, ``policy.*``, ``confirmation.*``,
``tool.*``, ``state.transitioned``, …). The decision rows are bound to the chain through their
content (design text B §17): the trace record of the transaction that writes an
``outcomes``, ``proposals`` or ``confirmations`` row holds a ``ledger.rows_hashed`` event whose
``row_hashes`` are ``[table, hash]`` per row it wrote (:func:`row_hash` of the row's
:data:`ROW_COLUMNS`, the columns fixed once it is written), and a later change of those
columns (an outcome settled by the reconciler) records the row's new hash the same way;
``warrant ledger verify`` recomputes every row's hash and names a row whose content no
record holds. The columns that change in place (a proposal's verdict, a
confirmation's use, an outcome's ``resolved_status``, a command's status, attempts and
deadline) are not covered: the trace is their history. A command issued again after its
tool's permission refusal records its new hash (its arguments and grants may change). ``runs``
and observations are not covered.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from warrant.runner.canonical import stable_json

__all__ = [
    "GENESIS",
    "ROW_COLUMNS",
    "ROW_KEYS",
    "Break",
    "ChainRow",
    "Head",
    "anchor_hash",
    "check_run",
    "jsonb_text",
    "record_hash",
    "recorded_row_hashes",
    "row_hash",
    "row_values",
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


# -- the decision rows' content hashes ---------------------------------------------------------

#: Per table, the columns of a decision row that are fixed once it is written (what its hash
#: covers).
ROW_COLUMNS: dict[str, tuple[str, ...]] = {
    "commands": (
        "id",
        "run_id",
        "step",
        "branch",
        "tool",
        "tool_version",
        "arguments",
        "idempotency_token",
        "confirmation_id",
        "grant_ids",
        "effect_key",
    ),
    "outcomes": ("command_id", "attempt", "status", "code", "retryable", "message", "output"),
    "proposals": ("run_id", "step", "branch", "proposal_id", "kind", "raw", "observation_version"),
    "confirmations": (
        "id",
        "run_id",
        "proposal_hash",
        "tool",
        "approved",
        "expires_at_step",
        "decided_by",
        "precondition_fingerprint",
    ),
}

#: What names a row in a break: per table, the columns shown (its primary key first).
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "commands": ("id", "step", "branch"),
    "outcomes": ("id", "command_id", "attempt"),
    "proposals": ("id", "step", "branch"),
    "confirmations": ("id",),
}

#: A column a write may leave out takes its default (the same value either way).
_ROW_DEFAULTS: dict[str, dict[str, Any]] = {
    "commands": {"branch": 0, "grant_ids": []},
    "outcomes": {"attempt": 1, "retryable": False},
    "proposals": {"branch": 0},
}


def row_hash(table: str, values: Mapping[str, Any]) -> str:
    """The content hash of a decision row: ``sha256`` of ``warrant-row-v1``, the table and
    its :data:`ROW_COLUMNS` values as ``jsonb::text`` prints them (:func:`jsonb_text`: the
    same for the values a write binds and for the row read back, whatever ``jsonb`` did to
    their numbers; a value nested too deep for it or not JSON, as ``json.dumps(sort_keys=True)``
    writes it). A missing or null column with a default counts as that default."""
    defaults = _ROW_DEFAULTS.get(table, {})
    row = [defaults.get(c) if values.get(c) is None else values.get(c) for c in ROW_COLUMNS[table]]
    try:
        text = jsonb_text(row)
    except (RecursionError, TypeError):  # too deep, or no JSON value: a write never fails here
        text = stable_json(row)
    return hashlib.sha256(f"warrant-row-v1\n{table}\n{text}".encode()).hexdigest()


def row_values(table: str, row: Any) -> dict[str, Any]:
    """A row object's :data:`ROW_COLUMNS` (an ORM instance, a result row)."""
    return {c: getattr(row, c, None) for c in ROW_COLUMNS[table]}


def recorded_row_hashes(events: Iterable[Any]) -> dict[str, set[str]]:
    """Per table, the row hashes a run's events record (``row_hashes`` in their details)."""
    found: dict[str, set[str]] = {}
    for event in events:
        details = event[1] if isinstance(event, list | tuple) and len(event) > 1 else {}
        entries = details.get("row_hashes") if isinstance(details, dict) else None
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, list | tuple) and len(entry) == 2:
                found.setdefault(str(entry[0]), set()).add(str(entry[1]))
    return found
