"""One error tree: every exception class warrant defines derives from ``WarrantError`` and has
a stable default code; the CLI maps error classes (not code prefixes) to exit codes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import warrant
from warrant.runner.errors import (
    HandoffNotFound,
    InvalidRequest,
    MemoryNotFound,
    NotFound,
    RunNotFound,
    ServiceUnavailable,
    StateConflict,
    WarrantError,
)

#: Modules that cannot be imported on their own, with the reason.
NOT_IMPORTABLE = {
    # Alembic's environment script: runs migrations at import, needs alembic's context.
    "warrant.ledger.migrations.env": "alembic runs it, with its migration context",
}
#: Exception classes defined in warrant.* that are deliberately outside the tree, with the
#: reason. Empty: keep it that way unless there is a reason to write here.
OUTSIDE_THE_TREE: dict[str, str] = {}


def _modules() -> list[str]:
    errors: list[str] = []
    names = ["warrant"] + [
        info.name
        for info in pkgutil.walk_packages(warrant.__path__, "warrant.", onerror=errors.append)
        if info.name not in NOT_IMPORTABLE
    ]
    assert not errors, f"packages that failed to import while walking: {errors}"
    return names


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("warrant."):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_exception_class_derives_from_warrant_error():
    classes = _exception_classes()
    assert "warrant.runner.errors.WarrantError" in classes
    assert "warrant.ledger.repo.StaleVersion" in classes  # the walk reached the ledger
    assert "warrant.runner.planner_protocol.PlannerFailure" in classes
    outside = sorted(
        name
        for name, cls in classes.items()
        if not issubclass(cls, WarrantError) and name not in OUTSIDE_THE_TREE
    )
    assert outside == [], f"exception classes outside the WarrantError tree: {outside}"


def test_every_warrant_error_has_a_default_code():
    classes = {n: c for n, c in _exception_classes().items() if issubclass(c, WarrantError)}
    assert len(classes) > 15
    missing = sorted(n for n, c in classes.items() if not (isinstance(c.code, str) and c.code))
    assert missing == [], f"error classes without a default code: {missing}"


def test_the_formerly_loose_errors_keep_their_names_and_codes():
    from warrant.ledger.repo import StaleVersion
    from warrant.runner.planners import PlannerFailure

    stale = StaleVersion("run r is no longer at version 3")
    assert isinstance(stale, StateConflict) and stale.code == "STALE_VERSION"
    assert stale.to_dict() == {"code": "STALE_VERSION", "message": str(stale)}
    failure = PlannerFailure("MODEL_UNREACHABLE", usage=None, calls=2)
    assert isinstance(failure, WarrantError)
    assert (failure.code, failure.calls, str(failure)) == (
        "MODEL_UNREACHABLE",
        2,
        "MODEL_UNREACHABLE",
    )
    assert PlannerFailure.code == "PLANNER_FAILED"


def test_not_found_kinds():
    for cls, code in (
        (RunNotFound, "RUN_NOT_FOUND"),
        (HandoffNotFound, "HANDOFF_NOT_FOUND"),
        (MemoryNotFound, "MEMORY_NOT_FOUND"),
    ):
        assert issubclass(cls, NotFound) and cls("x").code == code
    assert not issubclass(HandoffNotFound, RunNotFound)


@pytest.mark.parametrize(
    ("exc", "exit_code"),
    [
        (InvalidRequest("unknown role 'x'", code="UNKNOWN_ROLE"), 2),
        (InvalidRequest("no such tool", code="UNKNOWN_TOOL"), 2),
        (HandoffNotFound("no handoff h"), 2),
        (StateConflict("already resolved", code="HANDOFF_ALREADY_RESOLVED"), 2),
        (ServiceUnavailable("down"), 3),
        # exit codes follow the class, not the code: an UNKNOWN_* code is no longer special
        (ServiceUnavailable("down", code="UNKNOWN_SOMETHING"), 3),
        (WarrantError("other"), 1),
    ],
)
def test_the_cli_maps_error_classes_to_exit_codes(exc, exit_code):
    import typer

    from warrant.runner.cli.common import fail

    with pytest.raises(typer.Exit) as caught:
        fail(exc, as_json=True)
    assert caught.value.exit_code == exit_code


def test_role_queues_rejects_an_unknown_role_as_invalid_request():
    from warrant.runner.stack.roles import role_queues

    with pytest.raises(InvalidRequest) as caught:
        role_queues("janitor")
    assert caught.value.code == "UNKNOWN_ROLE"
    with pytest.raises(InvalidRequest) as caught:
        role_queues("tool", tools=["no_such_tool_anywhere"])
    assert caught.value.code == "UNKNOWN_TOOL"


def test_every_error_class_code_is_an_error_code_member():
    from warrant.runner.codes import ErrorCode

    classes = {
        n: c
        for n, c in _exception_classes().items()
        # a plug-in's tools raise codes of their own: the demo plug-in is one
        if issubclass(c, WarrantError) and not n.startswith("warrant_demo.")
    }
    loose = sorted(n for n, c in classes.items() if not isinstance(c.code, ErrorCode))
    assert loose == [], f"error classes whose code is not an ErrorCode member: {loose}"
    assert warrant.ErrorCode is ErrorCode
    assert RunNotFound("x").to_dict() == {"code": "RUN_NOT_FOUND", "message": "x"}


def test_every_code_given_where_an_error_is_raised_is_an_error_code_and_none_is_unused():
    from bench import error_codes_table
    from warrant.runner.codes import ErrorCode

    defaults, raised = error_codes_table.scan()
    assert defaults["RunNotFound"] == "RUN_NOT_FOUND" and "InvalidRequest" in raised["USAGE_ERROR"]
    values = {c.value for c in ErrorCode}
    assert sorted(set(raised) - values) == [], "a code given at a raise site is no ErrorCode"
    unused = sorted(values - set(raised) - set(defaults.values()))
    assert unused == [], f"ErrorCode members nothing raises: {unused}"


def test_the_error_codes_table_is_up_to_date():
    from bench import error_codes_table

    assert error_codes_table.main(["--check"]) == 0, "run python -m bench.error_codes_table"
