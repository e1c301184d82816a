"""The ``warrant`` command line. Every command takes ``--json``; errors carry stable codes.

The commands live in one module per family (:data:`COMMANDS` says which): ``runs`` (+
``start``, ``proposals``: the rest of ``run``, loaded by :data:`RUN_COMMANDS`), ``ledger``
(the administrators' ``ledger``, ``token`` and ``gate``), ``stack`` (``worker``, ``beat``,
``up``, ``down``, ``demo``), ``handoffs`` (``handoff`` and ``memory``), and ``tools``,
``db``, ``mcp``, ``serve``, ``reconcile``.

:func:`main` runs the app with click's standalone mode off, so that every error takes one
path: a usage error (``USAGE_ERROR``), a setting that cannot be read (``SETTINGS_INVALID``) and
a :class:`~warrant.runner.errors.WarrantError` print ``{"error": {"code", "message"}}`` under
``--json`` (else one line on stderr) with the exit codes of
:mod:`~warrant.runner.cli.common`; anything else is ``INTERNAL_ERROR`` (exit 1) with
the exception's type and message, never a raw traceback (``run()`` from Python raises none of
these: tests and embedders see the exit code).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from typing import Annotated, Any, ClassVar

import typer
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_group_from_info
from typer.models import TyperInfo

from warrant.runner.cli import version
from warrant.runner.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    report,
    settings_error,
)
from warrant.runner.errors import InvalidRequest, WarrantError
from warrant.runner.settings import load_settings

__all__ = ["app", "main", "run", "version"]

# The command line's one lazy place: a command's module (and what it imports: the broker and
# Celery, SQLAlchemy, the HTTP server) is imported when that command runs or its help is
# shown, never at start-up: `warrant run list` loads the run commands it needs, nothing else.
#: Each command of the root: its module under ``warrant.runner.cli`` and the attribute there
#: (a function: a command; a Typer app: a command group), in the order ``--help`` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "reconcile": ("reconcile", "reconcile_once"),
    "beat": ("stack", "beat"),
    "worker": ("stack", "worker"),
    "up": ("stack", "up"),
    "down": ("stack", "down"),
    "demo": ("stack", "demo"),
    "serve": ("serve", "serve"),
    "run": ("runs", "run_app"),
    "tools": ("tools", "tools_app"),
    "db": ("db", "db_app"),
    "memory": ("handoffs", "memory_app"),
    "handoff": ("handoffs", "handoff_app"),
    "token": ("ledger", "token_app"),
    "ledger": ("ledger", "ledger_app"),
    "gate": ("ledger", "gate_app"),
    "policy": ("policy", "policy_app"),
    "mcp": ("mcp", "mcp_app"),
}
#: The ``run`` commands other modules add to ``runs.run_app`` (importing the module registers
#: them): ``run start`` imports the broker's registrations, which ``run list`` does without.
RUN_COMMANDS: dict[str, str] = {
    "answer": "proposals",
    "propose": "proposals",
    "decision": "proposals",
    "fork": "start",
    "start": "start",
    "wait": "start",
    "replay": "policy",
}


def _module(name: str) -> object:
    return importlib.import_module(f"warrant.runner.cli.{name}")


class _Commands(MutableMapping[str, Any]):
    """A lazy group's commands: every name is in it from the start, in ``--help``'s order; the
    command behind a name is built the first time it is looked up."""

    def __init__(self, built: dict[str, Any], names: Iterable[str], load: Callable[[str], Any]):
        self._built = dict(built)
        self._names = [*built, *(name for name in names if name not in built)]
        self._load = load

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in self._names:
                raise KeyError(name)
            self._built[name] = self._load(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        if name not in self._names:
            self._names.append(name)

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._built.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)


class _LazyGroup(TyperGroup):
    """A command group whose commands (``lazy``: name to what loads it) are built on demand."""

    lazy: ClassVar[dict[str, object]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(dict(self.commands), self.lazy, self.load)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names alone: no command module is imported

    def load(self, name: str) -> Any:
        raise NotImplementedError


class _RunGroup(_LazyGroup):
    lazy = dict(RUN_COMMANDS)

    def load(self, name: str) -> Any:
        _module(RUN_COMMANDS[name])  # registers its commands on run_app
        run_app = _module("runs").run_app  # type: ignore[attr-defined]
        info = next(c for c in run_app.registered_commands if c.name == name)
        return get_command_from_info(
            info,
            pretty_exceptions_short=run_app.pretty_exceptions_short,
            rich_markup_mode=run_app.rich_markup_mode,
        )


class _RootGroup(_LazyGroup):
    lazy = dict(COMMANDS)

    def load(self, name: str) -> Any:
        module, attribute = COMMANDS[name]
        found = getattr(_module(module), attribute)
        if isinstance(found, typer.Typer):
            return get_group_from_info(
                TyperInfo(found, name=name, cls=_RunGroup if name == "run" else TyperGroup),
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
                suggest_commands=app.suggest_commands,
            )
        return get_command_from_info(
            typer.models.CommandInfo(name=name, callback=found),
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        )


app = typer.Typer(
    help="warrant: the model proposes, the program decides.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_RootGroup,
)


#: The options that only print help (the command line's, as typed).
_HELP = frozenset({"--help", "-h"})


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"warrant {version()}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
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
    if _HELP.isdisjoint(sys.argv[1:]):  # help is readable whatever the settings say
        # read once, here: a bad one is SETTINGS_INVALID before any command runs, and every
        # command takes them from the root context (common.settings_of)
        ctx.obj = load_settings()


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
