"""The ``warrant`` command line. Every command takes ``--json``; errors carry stable codes.

One module per command group: :mod:`~warrant.runner.cli.runs` (+ ``start``: ``run
start`` and ``run wait``), ``tools``, ``db``, ``memory``, ``handoffs``, ``tokens``; the
commands that run processes (``worker``, ``beat``, ``reconcile``, ``up``, ``down``,
``demo``) in :mod:`~warrant.runner.cli.stack`.

:func:`main` runs the app with click's standalone mode off, so that every error takes one
path: a usage error (``USAGE_ERROR``), a setting that cannot be read (``SETTINGS_INVALID``) and
a :class:`~warrant.runner.errors.WarrantError` print ``{"error": {"code", "message"}}`` under
``--json`` (else one line on stderr) with the exit codes of
:mod:`~warrant.runner.cli.common`; anything else is ``INTERNAL_ERROR`` (exit 1) with
the exception's type and message, never a raw traceback (``run()`` from Python raises none of
these: tests and embedders see the exit code).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from warrant.runner.cli import (
    answers,
    db,
    handoffs,
    memory,
    proposals,
    runs,
    stack,
    start,
    tokens,
)
from warrant.runner.cli import gate as gate_cli
from warrant.runner.cli import ledger as ledger_cli
from warrant.runner.cli import mcp as mcp_cli
from warrant.runner.cli import tools as tools_cli
from warrant.runner.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    report,
    settings_error,
)
from warrant.runner.cli.serve import serve
from warrant.runner.errors import InvalidRequest, WarrantError

__all__ = ["app", "main", "run", "version"]

# importing them registers `warrant run answer`, `run start`, `run wait`, `run propose` and
# `run decision`
_REGISTERED = (
    answers.run_answer,
    start.run_start,
    start.run_wait,
    proposals.run_propose,
    proposals.run_decision,
)

app = typer.Typer(
    help="warrant: the model proposes, the program decides.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(runs.run_app, name="run")
app.add_typer(tools_cli.tools_app, name="tools")
app.add_typer(db.db_app, name="db")
app.add_typer(memory.memory_app, name="memory")
app.add_typer(handoffs.handoff_app, name="handoff")
app.add_typer(tokens.token_app, name="token")
app.add_typer(ledger_cli.ledger_app, name="ledger")
app.add_typer(gate_cli.gate_app, name="gate")
app.add_typer(mcp_cli.mcp_app, name="mcp")
app.command("reconcile")(stack.reconcile_once)
app.command("beat")(stack.beat)
app.command("worker")(stack.worker)
app.command("up")(stack.up)
app.command("down")(stack.down)
app.command("demo")(stack.demo)
app.command("serve")(serve)


def version() -> str:
    """The installed package's version (``warrant-runner``), or ``unknown`` in a tree that
    was never installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("warrant-runner")
    except PackageNotFoundError:
        return "unknown"


#: The options that only print help (the command line's, as typed).
_HELP = frozenset({"--help", "-h"})


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"warrant {version()}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the version of warrant and exit.",
        ),
    ] = False,
) -> None:
    """warrant: the model proposes, the program decides."""
    from warrant.runner.settings import load_settings

    if _HELP.isdisjoint(sys.argv[1:]):  # help is readable whatever the settings say
        load_settings()  # every command validates the settings first: SETTINGS_INVALID here


def _cli_errors() -> tuple[tuple[type[Exception], ...], tuple[type[BaseException], ...]]:
    """The usage errors and aborts of the command-line library: typer's own (it carries click
    inside since 0.2x), and click's where an older typer runs on click itself."""
    usage: list[type[Exception]] = [typer.TyperException]
    aborts: list[type[BaseException]] = [typer.Abort, KeyboardInterrupt]
    try:
        import click
    except ImportError:  # pragma: no cover - typer alone
        pass
    else:
        usage.append(click.ClickException)
        aborts.append(click.exceptions.Abort)
    return tuple(usage), tuple(aborts)


USAGE_ERRORS, ABORTS = _cli_errors()


def _usage_error(exc: Any, as_json: bool) -> int:
    """A command line typer refused: ``USAGE_ERROR`` (exit 2) under ``--json``; else its own
    message (with the usage line), as typer prints it."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # the help is printed already
        return EXIT_BAD_INPUT
    if as_json:
        report(InvalidRequest(exc.format_message(), code="USAGE_ERROR"), True)
        return EXIT_BAD_INPUT
    from typer import rich_utils

    rich_utils.rich_format_error(exc)
    return EXIT_BAD_INPUT


def run(args: Sequence[str] | None = None) -> int:
    """Run the command line ``args`` (default: ``sys.argv[1:]``); its exit code."""
    argv = list(sys.argv[1:] if args is None else args)
    as_json = "--json" in argv
    try:
        code = app(args=argv, prog_name="warrant", standalone_mode=False)
    except USAGE_ERRORS as exc:
        return _usage_error(exc, as_json)
    except ABORTS:
        return EXIT_INTERRUPTED
    except WarrantError as exc:
        return report(exc, as_json)
    except Exception as exc:
        if (settings := settings_error(exc)) is not None:
            return report(settings, as_json)
        problem = WarrantError(f"{type(exc).__name__}: {exc}", code="INTERNAL_ERROR")
        report(problem, as_json)
        return EXIT_FAILED
    return code if isinstance(code, int) else 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
