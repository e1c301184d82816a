"""What every ``warrant`` command shares: the consoles, the ``--json`` and ``--by`` options,
JSON output, errors turned into stable codes and exit codes, the client, and run and handoff
ids as people type them: whole, or a unique prefix of at least :data:`MIN_PREFIX` characters
(what fits on a screen and is read off a table)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from warrant.runner.errors import (
    ConfirmationRefused,
    HandoffNotFound,
    IdAmbiguous,
    InvalidRequest,
    NotFound,
    PluginError,
    RunNotFound,
    ServiceUnavailable,
    SettingsInvalid,
    SpecError,
    StateConflict,
    Unauthorized,
    WaitTimedOut,
    WarrantError,
)
from warrant.runner.settings import WarrantSettings, load_settings, settings_invalid

if TYPE_CHECKING:
    from warrant.runner.client.contract import RunnerClient

__all__ = [
    "BAD_INPUT",
    "EXIT_BAD_INPUT",
    "EXIT_BY_STATUS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TIMED_OUT",
    "EXIT_UNAVAILABLE",
    "EXIT_WAITING",
    "MIN_PREFIX",
    "ByOpt",
    "JsonOpt",
    "client_and_id",
    "console",
    "err",
    "fail",
    "guard",
    "make_client",
    "print_json",
    "report",
    "resolve",
    "settings_error",
    "settings_of",
]

console = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]

EXIT_OK = 0
"""The command did what it was asked; a waited-for run ``completed``."""
EXIT_FAILED = 1
"""The command or the run did not succeed: a waited-for run ``failed`` or ``cancelled``; an
error that is nobody's input (``WarrantError`` outside the classes below)."""
EXIT_BAD_INPUT = 2
"""Bad input: a usage error (``USAGE_ERROR``), a setting that cannot be read
(``SETTINGS_INVALID``), or an error in :data:`BAD_INPUT` (``RUN_NOT_FOUND``, ``ID_AMBIGUOUS``,
``RUN_FINISHED``, ``STATUS_INVALID``, …)."""
EXIT_UNAVAILABLE = 3
"""Redis, RabbitMQ, PostgreSQL or the warrant server cannot be reached."""
EXIT_WAITING = 4
"""A waited-for run waits for a person: ``waiting_confirmation``, ``needs_input`` or
``handoff`` (``warrant run show`` says what it waits for)."""
EXIT_TIMED_OUT = 5
"""The wait's ``--timeout`` passed while the run was still moving (it goes on; ``warrant run
wait RUN_ID`` re-attaches), or passed (plus a grace of a few seconds) while the ledger or the
broker did not answer (``WAIT_TIMED_OUT``)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C while waiting: the run goes on, only the wait stopped (the shell's 128 + SIGINT)."""

#: The exit code of a wait that ended at each run status (any other: :data:`EXIT_TIMED_OUT`).
EXIT_BY_STATUS = {
    "completed": EXIT_OK,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_FAILED,
    "waiting_confirmation": EXIT_WAITING,
    "waiting_grant": EXIT_WAITING,
    "needs_input": EXIT_WAITING,
    "handoff": EXIT_WAITING,
}

#: The error classes that exit ``EXIT_BAD_INPUT``: mapped by class, never by code.
BAD_INPUT: tuple[type[WarrantError], ...] = (
    InvalidRequest,
    SpecError,
    NotFound,
    StateConflict,
    ConfirmationRefused,
    Unauthorized,
    PluginError,
    SettingsInvalid,
)

ByOpt = Annotated[str, typer.Option("--by", help="Who decides (recorded with the decision).")]


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def report(exc: WarrantError, as_json: bool) -> int:
    """Print ``exc`` (``{"error": {"code", "message", …}}`` on stdout with ``--json``, else
    one line on stderr); its exit code, by class."""
    if isinstance(exc, BAD_INPUT):
        code = EXIT_BAD_INPUT
    elif isinstance(exc, ServiceUnavailable):
        code = EXIT_UNAVAILABLE
    elif isinstance(exc, WaitTimedOut):
        code = EXIT_TIMED_OUT
    else:
        code = EXIT_FAILED
    if as_json:
        print_json({"error": exc.to_dict()})
    else:
        # one line (no wrapping at the terminal's width); the message is text, not markup
        err.print(f"[bold red]error[/] \\[{exc.code}] {escape(str(exc))}", soft_wrap=True)
        for item in getattr(exc, "errors", []):
            err.print(f"  - {item['field']}: {item['message']}")
    return code


def fail(exc: WarrantError, as_json: bool) -> NoReturn:
    raise typer.Exit(report(exc, as_json))


_T = TypeVar("_T")


def guard(as_json: bool, fn: Callable[[], _T]) -> _T:
    """``fn()``; a :class:`WarrantError` (or an unreachable service, a setting that cannot
    be read) is printed with its code and ends the command with its exit code."""
    try:
        return fn()
    except WarrantError as exc:
        fail(exc, as_json)
    except Exception as exc:  # a service that cannot be reached, typically
        from psycopg import OperationalError as DriverOperationalError
        from sqlalchemy.exc import OperationalError

        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, OperationalError | DriverOperationalError):  # as the API says it
            message = f"cannot reach the ledger database: {first}"
            fail(ServiceUnavailable(message, code="DATABASE_UNAVAILABLE"), as_json)
        if isinstance(exc, ConnectionError | OSError):
            fail(ServiceUnavailable(first), as_json)
        if (settings := settings_error(exc)) is not None:
            fail(settings, as_json)
        raise


def settings_error(exc: BaseException) -> SettingsInvalid | None:
    """``exc`` as :class:`SettingsInvalid` if it is a setting that cannot be read: pydantic
    refusing a ``WARRANT_*`` variable, or SQLAlchemy a database URL; else ``None``."""
    from pydantic import ValidationError
    from sqlalchemy.exc import ArgumentError

    if isinstance(exc, ValidationError):
        return settings_invalid(exc)
    if isinstance(exc, ArgumentError) and "URL" in str(exc):
        return SettingsInvalid(f"WARRANT_DATABASE_URL is not a database URL: {exc}")
    return None


def settings_of(ctx: typer.Context) -> WarrantSettings:
    """The settings the command line's root read for this command (:mod:`warrant.runner.cli._app`
    keeps them on the root context); a command group run on its own reads them here."""
    loaded = ctx.find_root().obj
    return loaded if isinstance(loaded, WarrantSettings) else load_settings()


def make_client(*, remote_ok: bool = True, settings: WarrantSettings | None = None) -> RunnerClient:
    """The client a command works with: a :class:`~warrant.runner.client.remote.RemoteClient`
    of ``WARRANT_SERVER_URL`` (with ``WARRANT_API_TOKEN``; none: ``TokenInvalid``) when that is
    set and ``remote_ok``, else the database-backed :class:`~warrant.runner.client.api.Client`
    (``remote_ok=False``: commands that keep to the database when it is in the environment).
    Either is a :class:`~warrant.runner.client.contract.RunnerClient`: the commands never ask
    which one they hold."""
    if remote_ok and (settings or load_settings()).server_url:
        from warrant.runner.client.remote import remote_from_settings  # lazy: httpx, remote only

        remote = remote_from_settings(settings or load_settings())
        assert remote is not None
        return remote
    from warrant.runner.client.api import Client  # lazy: Celery + SQLAlchemy, ~0.5 s

    return Client.from_env(database_only=True)


def client_and_id(
    as_json: bool, key: str, *, kind: str = "run", remote_ok: bool = True
) -> tuple[RunnerClient, str]:
    """The command's client (:func:`make_client`) and the whole id ``key`` names (a prefix is
    resolved: :func:`resolve`); either failing ends the command."""
    client = guard(as_json, lambda: make_client(remote_ok=remote_ok))
    return client, guard(as_json, lambda: resolve(client, key, kind))


#: The shortest prefix accepted: shorter ones would too often name several runs.
MIN_PREFIX = 6


def resolve(client: RunnerClient, key: str, kind: str = "run") -> str:
    """The whole id of the run (``kind="handoff"``: the handoff, or the run handed off) ``key``
    names (``RUN_NOT_FOUND``, ``HANDOFF_NOT_FOUND``, ``ID_AMBIGUOUS``)."""
    found = client.ids_like(key, kind=kind, min_length=MIN_PREFIX)
    if len(found) > 1:
        raise IdAmbiguous(
            f"{key!r} starts more than one {kind} id ({', '.join(found)}, …): give more characters",
            matches=found,
        )
    if not found:
        missing = HandoffNotFound if kind == "handoff" else RunNotFound
        hint = f" (a prefix needs {MIN_PREFIX} characters)" if len(key) < MIN_PREFIX else ""
        raise missing(f"no {kind} {key}{hint}")
    return found[0]
