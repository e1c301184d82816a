"""docs/guarantees.md sets CTRLRun's 32 guarantees beside warrant (issue 36, item 7): exactly
the 32 rows, in order, each with a status; every "meets" names a test, every test the page
names exists (parsed with ``ast``, so the check needs no services), and the tally agrees
with the table, so the page cannot claim a guarantee a moved or deleted test used to show."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guarantees.md"
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
STATUSES = ("meets", "partly", "not yet")
TALLY = re.compile(r"^- (meets|partly|not yet) \((\d+)\): (.*)$", re.MULTILINE)


def _section(title: str) -> str:
    return PAGE.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _rows() -> list[list[str]]:
    """The table's rows (header and rule excluded), each split into its cells."""
    lines = [line for line in _section("The 32 guarantees").splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines[2:]]


def _status(cell: str) -> str:
    """``meets``, ``partly`` or ``not yet``, alone or followed by ``(what brings it)``."""
    found = [s for s in STATUSES if cell == s or cell.startswith(f"{s} (")]
    assert found, f"not a status: {cell!r}"
    return found[0]


@cache
def _tests_in(path: str) -> frozenset[str]:
    """The test functions a file defines: at module level and in classes."""
    tree = ast.parse((ROOT / path).read_text())
    names = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }
    return frozenset(names)


def test_exactly_the_32_guarantees_in_order_each_with_a_status() -> None:
    rows = _rows()
    assert [row[0] for row in rows] == [f"G{n}" for n in range(1, 33)]
    for row in rows:
        assert len(row) == 5, row
        _status(row[2])
        assert row[1] and row[4], row  # a paraphrase, and how it holds or what is missing


def test_every_meets_names_a_test() -> None:
    for row in _rows():
        if _status(row[2]) == "meets":
            assert TEST_ID.findall(row[3]), f"{row[0]} meets but names no test"
        # a cell naming something must name it in the one form this test can check
        assert not row[3] or TEST_ID.sub("", row[3]).strip(" ,") == "", row[3]


def test_every_named_test_exists() -> None:
    named = TEST_ID.findall(PAGE.read_text())
    assert len(named) >= 40  # the table and the section after it
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not (ROOT / path).is_file() or name not in _tests_in(path)
    ]
    assert missing == []


def test_the_tally_is_the_table() -> None:
    by_status: dict[str, list[str]] = {s: [] for s in STATUSES}
    for row in _rows():
        by_status[_status(row[2])].append(row[0])
    tally = {s: (int(n), ids.split(", ")) for s, n, ids in TALLY.findall(_section("Tally"))}
    assert tally == {s: (len(ids), ids) for s, ids in by_status.items() if ids}  # none: no line
