"""The public surface is explicit and pinned; the pure core imports no Celery and no SQL."""

from __future__ import annotations

import subprocess
import sys

from bench import architecture
from warrant import runner, tools

PINNED_RUNNER = {
    "BrokerUnavailable",
    "Budgets",
    "Client",
    "ConfirmationRefused",
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
    "ConfirmationPolicy",
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


def test_all_is_pinned():
    assert set(runner.__all__) == PINNED_RUNNER
    assert set(tools.__all__) == PINNED_TOOLS
    for name in runner.__all__:
        assert hasattr(runner, name)


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
