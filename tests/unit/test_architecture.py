"""The layers of ARCHITECTURE.md, checked on the source (``python -m tests.lint.architecture``)."""

from __future__ import annotations

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
    assert arch.layer_of("broker.stage_tool") > arch.layer_of("ledger.repo")  # type: ignore[operator]
    assert arch.layer_of("runner.policy") < arch.layer_of("ledger.repo")  # type: ignore[operator]
    assert arch.layer_of("runner.cli") == len(arch.LAYERS) - 1
    assert arch._SQL.search("run = s.get(Run, run_id)")
    assert arch._SQL.search("conn.execute(select(Run))")
    assert not arch._SQL.search("progress.update(task)")
