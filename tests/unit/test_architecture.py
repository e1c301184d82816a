"""The layers of ARCHITECTURE.md, checked on the source (``python -m tests.lint.architecture``)."""

from __future__ import annotations

import ast

from tests.lint import architecture as arch


def test_every_module_has_a_layer() -> None:
    assert arch.unlayered() == []


def test_imports_only_point_down() -> None:
    assert arch.upward_imports() == []


def test_no_import_cycles() -> None:
    assert arch.cycles() == []


def test_run_status_changes_are_committed_only_by_the_ledger() -> None:
    """Stages and the client ask the state machine for a change and commit it with
    ``ledger.repo.commit``: no other module calls ``transition`` itself."""
    assert arch.transition_sites() == []


def test_no_sql_outside_the_ledger() -> None:
    assert arch.sql_outside_ledger() == []


def test_modules_are_small() -> None:
    assert [m for m in arch.largest_modules(10) if m[1] > arch.MAX_MODULE_LINES] == []


def test_long_functions_have_a_reason() -> None:
    long = {name for name, lines in arch.functions() if lines > arch.MAX_FUNCTION_LINES}
    assert long - set(arch.LONG_FUNCTIONS) == set()


def test_the_checker_sees_a_violation() -> None:
    """The layer table is not vacuous: the broker sits above the ledger, the core below it."""
    assert arch.layer_of("broker.tool.stage") > arch.layer_of("ledger.repo")  # type: ignore[operator]
    assert arch.layer_of("runner.policy") < arch.layer_of("ledger.repo")  # type: ignore[operator]
    assert arch.layer_of("runner.cli") == len(arch.LAYERS) - 1
    assert arch._SQL.search("run = s.get(Run, run_id)")
    assert arch._SQL.search("conn.execute(select(Run))")
    assert not arch._SQL.search("progress.update(task)")


def test_layers_are_declared_next_to_the_code() -> None:
    """A package's ``__init__`` declares the layer of its modules; a module that differs
    declares its own."""
    assert arch.layer_of("runner") == arch.LAYERS.index("pure core")
    assert arch.layer_of("runner.errors") == arch.LAYERS.index("codes and errors")
    assert arch.layer_of("runner.planners.kinds") == arch.LAYERS.index("adapters")
    assert arch.layer_of("tools._contract") == arch.LAYERS.index("pure core")
    assert arch.layer_of("tools._builtin") == arch.LAYERS.index("adapters")
    assert arch.layer_of("runner.server.http.app") == len(arch.LAYERS) - 1


def test_a_module_that_resolves_to_no_layer_is_reported(monkeypatch) -> None:
    """A typo, a computed value or no declaration at all (a top-level package included) is
    reported, not silently given its package's layer."""

    def module(name: str, source: str) -> arch.Module:
        return arch.Module(name, arch.ROOT / f"{name}.py", ast.parse(source), 1)

    fake = [
        module("runner", '__layer__ = "pure core"'),
        module("runner.typo", '__layer__ = "pure cor"'),
        module("runner.computed", '__layer__ = "pure " + "core"'),
        module("runner.plain", "x = 1"),
        module("elsewhere", "x = 1"),
    ]
    monkeypatch.setattr(arch, "modules", lambda: iter(fake))
    monkeypatch.setattr(arch, "declared_layers", arch.declared_layers.__wrapped__)
    assert arch.layer_of("runner.plain") == arch.LAYERS.index("pure core")
    assert arch.unlayered() == ["elsewhere", "runner.computed", "runner.typo"]


def test_function_level_imports_say_why() -> None:
    """A project import inside a function carries ``# lazy: <reason>`` (issue 48)."""
    assert arch.unexplained_function_imports() == []


def test_an_unexplained_function_import_is_reported(tmp_path, monkeypatch) -> None:
    source = (
        "def f():\n"
        "    from warrant.ledger.db import engine_for\n"
        "    from warrant.broker.app import app  # lazy: builds Celery\n"
        "    from warrant.runner.client.api import (  # lazy: Celery\n"
        "        Client,\n"
        "    )\n"
        "    import warrant.tools\n"
        "    import json\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(source)
    monkeypatch.setattr(arch, "ROOT", tmp_path)
    fake = [arch.Module("runner.mod", path, ast.parse(source), 8)]
    monkeypatch.setattr(arch, "modules", lambda: iter(fake))
    assert arch.unexplained_function_imports() == ["mod.py:2", "mod.py:7"]
