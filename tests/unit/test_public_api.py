"""The public surface is explicit and pinned; the pure core imports no Celery and no SQL."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tests.lint import architecture
from warrant import runner, tools

PINNED_RUNNER = {
    "BrokerUnavailable",
    "Budgets",
    "Client",
    "ConfirmationRefused",
    "ErrorCode",
    "Unauthorized",
    "Grant",
    "HandoffNotFound",
    "InvalidRequest",
    "NotFound",
    "Outcome",
    "Rejection",
    "RunInfo",
    "RunNotFound",
    "RunSpec",
    "RunStatus",
    "RunnerClient",
    "ServiceUnavailable",
    "SpecError",
    "StateConflict",
    "StopReason",
    "ToolError",
    "ToolFailed",
    "ToolRejected",
    "ToolUnknown",
    "WarrantError",
    "parse_run_spec",
}
PINNED_TOOLS = {
    "Accepted",
    "Attribution",
    "Batch",
    "ItemResult",
    "ItemStatus",
    "JobHooks",
    "JobState",
    "JobStatus",
    "ObservationSource",
    "ResourceKind",
    "ToolError",
    "ToolFailed",
    "ToolInterrupted",
    "ToolPermissionDenied",
    "ToolRejected",
    "ToolUnknown",
    "ConfirmationPolicy",
    "FlagAction",
    "UntrustedPolicy",
    "Isolation",
    "OnError",
    "PreconditionContext",
    "ReconcileResult",
    "Registry",
    "SideEffect",
    "Tool",
    "ToolContext",
    "ToolInput",
    "ToolOutput",
    "build_registry",
    "DepsContext",
    "Plugin",
}

#: The other public faces: the test kit for tool authors and the agent framework adapters.
PINNED_FACES = {
    "warrant.testing": {"GateVerdict", "ToolHarness", "ToolOutcome"},
    "warrant.contrib.openai_agents": {"WarrantTools"},
    "warrant.contrib.pydantic_ai": {"WarrantToolset"},
}


def test_all_is_pinned():
    assert set(runner.__all__) == PINNED_RUNNER
    assert set(tools.__all__) == PINNED_TOOLS
    for name in runner.__all__:
        assert hasattr(runner, name)


@pytest.mark.parametrize("module", sorted(PINNED_FACES))
def test_the_other_faces_are_pinned(module):
    face = importlib.import_module(module)
    assert set(face.__all__) == PINNED_FACES[module]
    assert all(hasattr(face, name) for name in face.__all__)


def test_the_top_level_names_are_runner_and_tool_author_names():
    import warrant

    tool_author = set(tools.__all__) - {"Registry", "build_registry"}
    assert set(warrant.__all__) == PINNED_RUNNER | tool_author | {"__version__"}


def test_the_top_level_api_imports_in_a_fresh_interpreter():
    """Nothing imported first: ``from warrant import Client`` recursed in ``__getattr__``."""
    import warrant

    names = sorted(set(warrant.__all__) - {"__version__"})
    code = (
        f"from warrant import {', '.join(names)}\n"
        "import warrant\n"
        "assert warrant.Client is Client and warrant.WarrantError is WarrantError\n"
        "assert issubclass(ToolRejected, WarrantError)\n"
        "print('ok')\n"
    )
    cli = (
        "import warrant.runner.cli._app, warrant.runner.cli.runs\n"
        "from warrant.runner.cli import app, main\n"
        "import warrant.runner.cli as cli\n"
        "assert type(app).__name__ == 'Typer' and cli.app is app\n"
    )
    for snippet in (code, "import warrant; print(warrant.WarrantError.__name__)", cli):
        out = subprocess.run(
            [sys.executable, "-c", snippet], capture_output=True, text=True, cwd="/", timeout=60
        )
        assert out.returncode == 0, out.stderr[-2000:]
    star = "from warrant import *\nprint(sorted(n for n in dir() if not n.startswith('_')))"
    out = subprocess.run([sys.executable, "-c", star], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert eval(out.stdout) == names


def test_an_unknown_top_level_name_is_an_attribute_error():
    import warrant

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        warrant.Nope  # noqa: B018


def test_every_error_is_a_warrant_error_with_a_code():
    for name in runner.__all__:
        obj = getattr(runner, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, runner.WarrantError)
            assert obj.code and obj.code.isupper()


#: The two lowest layers of ARCHITECTURE.md (codes and errors, the pure core).
PURE = sorted(
    f"warrant.{m.name}"
    for m in architecture.modules()
    if (layer := architecture.layer_of(m.name)) is not None and layer <= 1
)


def test_the_pure_core_imports_neither_celery_nor_sqlalchemy():
    assert "warrant.runner.run_machine" in PURE and "warrant.runner.policy" in PURE
    code = (
        "import sys\n"
        f"for m in {PURE!r}: __import__(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('celery', 'kombu', 'sqlalchemy', 'psycopg') "
        "or m.startswith(('warrant.broker', 'warrant.ledger')))\n"
        "print(','.join(sorted({m.split('.')[0] for m in bad})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_example_plug_in_needs_only_the_public_surface():
    """A tool author's imports: ``warrant`` and ``warrant.tools``, nothing internal."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples" / "weather_plugin"
    internal = [
        f"{path.name}: {node.module}"
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("warrant")
        and node.module not in ("warrant", "warrant.tools")
        and not (node.module or "").startswith("warrant_weather")
    ]
    assert internal == []
