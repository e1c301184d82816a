"""The adapters' home is ``warrant.contrib``; the old ``warrant.runner.contrib`` paths
re-export the same objects, with a ``DeprecationWarning`` naming the new path, for one
release."""

from __future__ import annotations

import importlib

import pytest

MOVED = [
    ("openai_agents", "WarrantTools"),
    ("pydantic_ai", "WarrantToolset"),
]


@pytest.mark.parametrize(("module", "name"), MOVED)
def test_the_old_path_warns_and_re_exports_the_same_object(module, name):
    new = importlib.import_module(f"warrant.contrib.{module}")
    old = importlib.import_module(f"warrant.runner.contrib.{module}")  # importing: no warning
    with pytest.warns(DeprecationWarning, match=rf"import {name} from warrant\.contrib\.{module}"):
        value = getattr(old, name)
    assert value is getattr(new, name)
    assert old.__all__ == new.__all__ == [name]
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        old.Nope  # noqa: B018


def test_from_the_old_path_import_warns_at_the_caller():
    with pytest.warns(DeprecationWarning) as caught:
        from warrant.runner.contrib.pydantic_ai import WarrantToolset  # noqa: F401
    assert caught[0].filename == __file__
