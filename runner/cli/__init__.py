"""The ``warrant`` command line (``app``; ``main`` is the console script).

``main`` answers ``warrant --version`` before importing any command (the app imports its
command groups, which import rich, typer and their own modules); everything else goes to
:func:`warrant.runner.cli._app.run`.
"""

from __future__ import annotations

__layer__ = "client, server, CLI and stack"

import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warrant.runner.cli._app import app

__all__ = ["app", "main", "version"]


def version() -> str:
    """The installed package's version (``warrant-runner``), or ``unknown`` in a tree that
    was never installed."""
    try:
        return package_version("warrant-runner")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: exits with the command's exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        sys.stdout.write(f"warrant {version()}\n")
        sys.exit(0)
    from warrant.runner.cli._app import run  # lazy: --version answers before typer/rich load

    sys.exit(run(args))


def __getattr__(name: str) -> Any:
    if name == "app":
        # The Typer app lives in the private ``_app``: a submodule named ``app`` would rebind
        # this attribute to itself once imported.
        from warrant.runner.cli._app import app as typer_app  # lazy: typer and rich, as main

        globals()["app"] = typer_app
        return typer_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
