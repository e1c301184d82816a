"""The README and the docs site (issue 37, item 1): the README stays short, every relative link in
it and in docs/ resolves (file and anchor), its ten-line plug-in loads as a tool, and every warrant
name on the names page exists in the code. `make docs` builds the site with mkdocs --strict."""

from __future__ import annotations

import importlib.util
import re
import sys
import unicodedata
from pathlib import Path

import pytest

from warrant.runner.codes import Rejection, RunStatus, StopReason
from warrant.runner.settings import WarrantSettings
from warrant.tools._plugins import build_registry

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINKED = [README, ROOT / "ARCHITECTURE.md", ROOT / "examples/weather_plugin/README.md", *PAGES]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
PLUGIN_MARKER = "<!-- plug-in: tests/unit/test_docs_site.py loads this block as a module -->"


def without_code(text: str) -> str:
    """The text outside fenced blocks and inline code (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """A heading's anchor, as Python-Markdown's toc (and, for these headings, GitHub) makes it."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(path: Path) -> list[str]:
    broken = []
    for match in LINK.finditer(without_code(path.read_text())):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        missing_anchor = bool(anchor) and resolved.suffix == ".md"
        if not resolved.exists() or (missing_anchor and anchor not in anchors(resolved)):
            broken.append(target)
    return broken


def test_the_readme_is_150_to_250_lines():
    lines = len(README.read_text().splitlines())
    assert 150 <= lines <= 250, f"README.md has {lines} lines"


def test_the_readme_keeps_the_test_command_ci_runs():
    assert "make test" in README.read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert broken_links(path) == [], f"{path.relative_to(ROOT)}: broken links"


def test_a_broken_link_or_anchor_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[a](#title) [b](#nope) [c](missing.md) [d](https://x.org/y)\n")
    assert broken_links(page) == ["#nope", "missing.md"]


def test_the_readme_plugin_loads_as_a_tool(tmp_path, monkeypatch):
    readme = README.read_text()
    after = readme[readme.index(PLUGIN_MARKER) + len(PLUGIN_MARKER) :]
    block = re.match(r"\s*```python\n(.*?)```", after, re.S)
    assert block, "a python block follows the plug-in marker"
    assert len(block.group(1).strip().splitlines()) <= 25
    (tmp_path / "readme_plugin_tools.py").write_text(block.group(1))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "readme_plugin_tools", raising=False)
    assert importlib.util.find_spec("readme_plugin_tools") is not None
    registry = build_registry(
        WarrantSettings(tools="readme_plugin_tools:SHOUT", plugin_entry_points=False),
        ask_mcp_servers=False,
    )
    shout = next(tool for tool in registry if tool.name == "shout")
    assert shout.capabilities == ("text:shout",)
    said = shout.execute(shout.input_model(text="hi"), None)  # type: ignore[arg-type]
    assert said.model_dump() == {"text": "HI"}


def names_page_rows(section: str) -> list[tuple[str, str]]:
    page = (ROOT / "docs" / "names.md").read_text()
    body = page.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 2 and cells[0] not in ("design text", "---"):
            rows.append((cells[0], cells[1]))
    return rows


def code_strings() -> str:
    return "\n".join(
        path.read_text()
        for folder in ("runner", "broker", "ledger", "tools")
        for path in (ROOT / folder).rglob("*.py")
    )


def test_every_warrant_name_on_the_names_page_exists():
    codes = {r.value for r in StopReason} | {r.value for r in Rejection}
    statuses = {s.value for s in RunStatus}
    source = code_strings()
    wrong = []
    for section, known in (("Stop reasons", codes), ("Rejection codes", codes)):
        wrong += [w for _, w in names_page_rows(section) if w.strip("`") not in known]
    wrong += [w for _, w in names_page_rows("Run states") if w.strip("`") not in statuses]
    for _, event in names_page_rows("Trace events"):
        name = event.strip("`")
        if f'"{name}"' not in source and f"'{name}'" not in source:
            wrong.append(event)
    assert wrong == [], f"docs/names.md names what warrant does not have: {wrong}"
    assert all(
        s.value in {w.strip("`") for _, w in names_page_rows("Run states")} for s in RunStatus
    )


def test_a_design_text_code_that_warrant_has_maps_to_itself():
    """A text's stop or gate code that warrant spells the same is that code, never another
    one's (a row naming ``DEADLINE_REACHED`` must not map it to ``MAX_STEPS_REACHED``)."""
    codes = {r.value for r in StopReason} | {r.value for r in Rejection}
    wrong = []
    for section in ("Stop reasons", "Rejection codes"):
        for text, warrant in names_page_rows(section):
            named = set(re.findall(r"`([A-Z_]+)`", text)) & codes
            if named and named != {warrant.strip("`")}:
                wrong.append((text, warrant))
    assert wrong == [], f"docs/names.md maps several text codes to one: {wrong}"
