"""The trace chain's check without services: each kind of broken link on a built chain, the
anchor hash, and jsonb's text for values whose text PostgreSQL is known to print."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

from warrant.ledger.chain import (
    GENESIS,
    Break,
    ChainRow,
    Head,
    anchor_hash,
    check_run,
    jsonb_text,
    record_hash,
    recorded_row_hashes,
    row_hash,
)
from warrant.ledger.repo import with_row_hashes

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def chain(n: int, run: str = "r1") -> list[ChainRow]:
    rows, prev, seq = [], GENESIS, 1
    for i in range(n):
        events = [["e", {"i": i}]] * (1 + i % 2)
        text = jsonb_text(events)
        at = T0 + timedelta(seconds=i)
        h = record_hash(prev, run, seq, i, None, at, text)
        rows.append(ChainRow(seq, i, None, at, text, len(events), prev, h))
        prev, seq = h, seq + len(events)
    return rows


def test_an_intact_chain_gives_its_head():
    rows = chain(5)
    head = check_run("r1", rows, rows[-1].seq + rows[-1].n_events - 1)
    assert head == Head("r1", 7, rows[-1].hash, 5)
    assert check_run("r0", [], 0) == Head("r0", 0, GENESIS, 0)


def test_each_kind_of_break_is_named():
    rows = chain(5)
    edited = [*rows]
    edited[2] = dataclasses.replace(rows[2], events_text=jsonb_text([["e", {"i": 99}]] * 1))
    assert check_run("r1", edited) == Break("r1", rows[2].seq, "edited", edited_detail())
    found = check_run("r1", rows[:2] + rows[3:])
    assert isinstance(found, Break) and (found.seq, found.kind) == (rows[3].seq, "deleted")
    found = check_run("r1", rows[:-1], 7)
    assert isinstance(found, Break) and found.kind == "deleted" and "at the end" in found.detail
    swapped = [rows[0], rows[2], rows[1], rows[3], rows[4]]
    found = check_run("r1", swapped)
    assert isinstance(found, Break) and (found.seq, found.kind) == (rows[2].seq, "reordered")
    stray = dataclasses.replace(rows[1], hash="f" * 64)
    found = check_run("r1", [rows[0], rows[1], stray, *rows[2:]])
    assert isinstance(found, Break) and found.kind in ("inserted", "edited")


def edited_detail() -> str:
    return "its content does not give its hash"


def test_anchor_hash_ignores_order_and_sees_every_head():
    heads = [["b", 3, "h2"], ["a", 7, "h1"]]
    assert anchor_hash(heads) == anchor_hash(list(reversed(heads)))
    assert anchor_hash(heads) != anchor_hash([["b", 3, "h2"], ["a", 6, "h1"]])


def test_jsonb_text_matches_what_postgresql_prints():
    # keys by length in bytes ("é" is two), then bytes
    value = {"bb": [1, 2.5, None, True], "a": {"é": 'x\ny"\\', "ctl": "\x01"}, "ccc": 1e-07}
    assert jsonb_text(value) == (
        '{"a": {"é": "x\\ny\\"\\\\", "ctl": "\\u0001"}, "bb": [1, 2.5, null, true],'
        ' "ccc": 0.0000001}'
    )
    assert jsonb_text(json.loads("[-0.0, 100.0, 10000000000000000000000]")) == (
        "[0.0, 100.0, 10000000000000000000000]"
    )


def test_a_decision_rows_hash_is_the_same_written_and_read_back_and_shows_an_edit():
    written = {"command_id": "c-1", "run_id": "r", "status": "succeeded", "output": {"n": 1e16}}
    read_back = {
        "id": 7,
        "command_id": "c-1",
        "attempt": 1,  # the column's default
        "status": "succeeded",
        "code": None,
        "retryable": False,
        "message": None,
        "output": {"n": 10000000000000000},  # what jsonb gives back
        "resolved_status": "applied",  # changes in place: not covered
    }
    assert row_hash("outcomes", written) == row_hash("outcomes", read_back)
    assert row_hash("outcomes", {**read_back, "status": "failed"}) != row_hash("outcomes", written)
    events = with_row_hashes([("tool.completed", {"status": "succeeded"})], [("outcomes", "h1")])
    assert events == [
        ("tool.completed", {"status": "succeeded"}),
        ("ledger.rows_hashed", {"row_hashes": [["outcomes", "h1"]]}),
    ]
    assert with_row_hashes([], [("proposals", "h2")]) == [
        ("ledger.rows_hashed", {"row_hashes": [["proposals", "h2"]]})
    ]
    assert with_row_hashes(events, []) is events
    assert recorded_row_hashes([*events, ["x", {"row_hashes": "no"}], ["y"]]) == {
        "outcomes": {"h1"}
    }
