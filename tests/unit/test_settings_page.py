"""docs/settings.md names every setting the code reads: its generated table is the one
``python -m bench.settings_table`` writes from ``WarrantSettings``' field docstrings (so it is never
out of date), and every ``WARRANT_*`` variable read directly by production code is on the page."""

from __future__ import annotations

import re
from pathlib import Path

from bench import settings_table
from warrant.runner.settings import WarrantSettings

ROOT = Path(__file__).parents[2]
PAGE = (ROOT / "docs" / "settings.md").read_text()

#: Variables set by warrant for its own child processes, not by people.
INTERNAL = {
    "WARRANT_UP_READY_FILE",  # `up --detach` tells its child where to say it is ready
    "WARRANT_ERROR",  # the root error's code, not a variable
}


def test_the_generated_table_is_up_to_date():
    assert settings_table.updated(PAGE) == PAGE, (
        "docs/settings.md is out of date: run python -m bench.settings_table"
    )
    assert settings_table.main(["--check"]) == 0


def test_every_settings_field_is_in_the_table_with_its_docstring():
    docstrings = settings_table.field_docstrings()
    missing = [
        f"WARRANT_{name.upper()}"
        for name in WarrantSettings.model_fields
        if f"`WARRANT_{name.upper()}`" not in PAGE
    ]
    assert missing == [], f"docs/settings.md lacks {missing}"
    undocumented = [name for name in WarrantSettings.model_fields if not docstrings.get(name)]
    assert undocumented == [], f"settings fields without a docstring: {undocumented}"


def test_a_changed_docstring_makes_the_page_stale():
    name = next(iter(WarrantSettings.model_fields))
    row = next(line for line in PAGE.splitlines() if line.startswith(f"| `WARRANT_{name.upper()}`"))
    stale = PAGE.replace(row, row.removesuffix(" |") + " (old text) |")
    assert stale != PAGE
    assert settings_table.updated(stale) == PAGE


def test_every_variable_the_code_reads_is_on_the_page():
    read = set()
    for folder in ("runner", "broker", "ledger", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"\bWARRANT_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    missing = sorted(v for v in read - INTERNAL if f"`{v}`" not in PAGE)
    assert missing == [], f"docs/settings.md lacks {missing}"
