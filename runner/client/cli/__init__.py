"""The ``warrant`` command line (``app``; ``main`` is the console script).

``main`` answers ``warrant --version`` before importing any command (the app imports its
command groups, which import rich, typer and their own modules); everything else goes to
:func:`warrant.runner.client.cli.app.main`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warrant.runner.client.cli.app import app

__all__ = ["app", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: exits with the command's exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            sys.stdout.write(f"warrant {version('warrant-runner')}\n")
        except PackageNotFoundError:
            sys.stdout.write("warrant unknown\n")
        sys.exit(0)
    from warrant.runner.client.cli.app import run

    sys.exit(run(args))


def __getattr__(name: str) -> Any:
    if name == "app":
        from warrant.runner.client.cli import app as app_module

        return app_module.app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
