"""The README's configuration table (with those of the docs/ pages) names every setting the
code reads: each field of ``WarrantSettings`` and every ``WARRANT_*`` variable read directly by
production code."""

from __future__ import annotations

import re
from pathlib import Path

from warrant.runner.settings import WarrantSettings

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()


def _configuration(page: str) -> str:
    """A page's ``## Configuration`` section ('' if it has none)."""
    if "## Configuration" not in page:
        return ""
    start = page.index("## Configuration")
    end = page.find("\n## ", start + 5)
    return page[start : end if end >= 0 else len(page)]


#: The README's table, and those of the pages in docs/ that document a setting of their own
#: (docs/observe-mode.md).
TABLE = _configuration(README) + "".join(
    _configuration(p.read_text()) for p in sorted((ROOT / "docs").glob("*.md"))
)

#: Variables set by warrant for its own child processes, not by people.
INTERNAL = {
    "WARRANT_UP_READY_FILE",  # `up --detach` tells its child where to say it is ready
    "WARRANT_ERROR",  # the root error's code, not a variable
}


def test_every_settings_field_is_in_the_table():
    missing = [
        f"WARRANT_{name.upper()}"
        for name in WarrantSettings.model_fields
        if f"`WARRANT_{name.upper()}`" not in TABLE
    ]
    assert missing == [], f"README's configuration table lacks {missing}"


def test_every_variable_the_code_reads_is_in_the_table():
    read = set()
    for folder in ("runner", "broker", "ledger", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"\bWARRANT_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    missing = sorted(v for v in read - INTERNAL if f"`{v}`" not in TABLE)
    assert missing == [], f"README's configuration table lacks {missing}"
