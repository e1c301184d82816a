"""ARCHITECTURE.md's rule table names, for every rule, the ``file:function`` that enforces it;
each entry must exist (a module-level function or class, or ``Class.method``), so the table
cannot point at a place that moved (issue 37, item 2)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY = re.compile(r"`([\w/]+\.py):([\w.]+)`")


def _rows() -> list[tuple[str, list[tuple[str, str]]]]:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## Where each seed rule lives", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| rule") or line.startswith("| ---"):
            continue
        rule, where = line.strip("| ").split(" | ", 1)
        rows.append((rule, ENTRY.findall(where)))
    return rows


def _defined(path: Path, name: str) -> bool:
    scope: list[ast.stmt] = ast.parse(path.read_text()).body
    for part in name.split("."):
        found = [node for node in scope if _names(node, part)]
        if not found:
            return False
        scope = getattr(found[0], "body", [])
    return True


def _names(node: ast.stmt, name: str) -> bool:
    """Does this statement define ``name`` (a function, a class, or an assignment)?"""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id == name for t in targets)
    return False


def test_every_rule_names_at_least_one_enforcement_point():
    rows = _rows()
    assert len(rows) >= 30
    assert [rule for rule, entries in rows if not entries] == []


def test_every_enforcement_point_exists():
    missing = [
        f"{path}:{name}"
        for _, entries in _rows()
        for path, name in entries
        if not (ROOT / path).exists() or not _defined(ROOT / path, name)
    ]
    assert missing == []
