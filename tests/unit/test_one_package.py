"""The repository's folders are one package: a bare ``import runner`` (``tools``, ``broker``,
``ledger``) from the repository root fails with a message saying what to write, so no second
copy of a module exists, and every error warrant defines is caught by ``except
warrant.WarrantError`` (issue 37, item 4)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import warrant
from tests.lint import architecture

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("folder", ["runner", "tools", "broker", "ledger"])
def test_a_bare_import_from_the_repository_root_fails_with_what_to_write(folder):
    done = subprocess.run(
        [sys.executable, "-c", f"import {folder}.errors"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert f"ImportError: import warrant.{folder}, not {folder}" in done.stderr


def test_no_second_copy_of_a_module_is_loaded_by_the_suite():
    twins = [name for name in sys.modules if name.split(".")[0] in architecture.PACKAGES]
    assert twins == []
    assert architecture.bare_imports() == []


def _warrant_modules():
    for info in pkgutil.walk_packages(warrant.__path__, "warrant."):
        if ".migrations" not in info.name:
            yield importlib.import_module(info.name)


def test_every_error_warrant_defines_is_a_warrant_error():
    errors = [
        obj
        for module in _warrant_modules()
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == module.__name__
    ]
    assert len(errors) >= 30  # the walk found the error tree (37 classes when written)
    assert [e for e in errors if not issubclass(e, warrant.WarrantError)] == []


def test_an_error_raised_deep_inside_is_caught_by_the_top_level_class():
    from warrant.runner.spec import parse_run_spec

    with pytest.raises(warrant.WarrantError) as caught:
        parse_run_spec({"planner": {"kind": 42}})
    assert caught.value.code == "SPEC_INVALID"
