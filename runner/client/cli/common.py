"""What every ``warrant`` command shares: the consoles, the ``--json`` and ``--by`` options,
JSON output, and errors turned into stable codes and exit codes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from warrant.runner.errors import (
    ConfirmationRefused,
    InvalidRequest,
    NotFound,
    PluginError,
    ServiceUnavailable,
    SpecError,
    StateConflict,
    TokenInvalid,
    Unauthorized,
    WarrantError,
)

__all__ = [
    "BAD_INPUT",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_UNAVAILABLE",
    "ByOpt",
    "JsonOpt",
    "console",
    "err",
    "fail",
    "guard",
    "make_client",
    "print_json",
]

console = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]

#: Exit codes: 0 ok, 1 the run/command did not succeed, 2 bad input, 3 services unavailable.
EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNAVAILABLE = 1, 2, 3

#: The error classes that exit ``EXIT_BAD_INPUT``: mapped by class, never by code.
BAD_INPUT: tuple[type[WarrantError], ...] = (
    InvalidRequest,
    SpecError,
    NotFound,
    StateConflict,
    ConfirmationRefused,
    Unauthorized,
    PluginError,
)

ByOpt = Annotated[str, typer.Option("--by", help="Who decides (recorded with the decision).")]


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def fail(exc: WarrantError, as_json: bool) -> None:
    if isinstance(exc, BAD_INPUT):
        code = EXIT_BAD_INPUT
    elif isinstance(exc, ServiceUnavailable):
        code = EXIT_UNAVAILABLE
    else:
        code = EXIT_FAILED
    if as_json:
        print_json({"error": exc.to_dict()})
    else:
        # one line (no wrapping at the terminal's width); the message is text, not markup
        err.print(f"[bold red]error[/] \\[{exc.code}] {escape(str(exc))}", soft_wrap=True)
        for item in getattr(exc, "errors", []):
            err.print(f"  - {item['field']}: {item['message']}")
    raise typer.Exit(code)


def guard(as_json: bool, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except WarrantError as exc:
        fail(exc, as_json)
    except Exception as exc:  # a service that cannot be reached, typically
        from sqlalchemy.exc import OperationalError

        if isinstance(exc, OperationalError | ConnectionError | OSError):
            fail(ServiceUnavailable(str(exc).splitlines()[0]), as_json)
        raise


def make_client(*, remote_ok: bool = True) -> Any:
    """The client a command works with: a :class:`~warrant.runner.client.remote.RemoteClient`
    of ``WARRANT_SERVER_URL`` (with ``WARRANT_API_TOKEN``; none: ``TokenInvalid``) when that is
    set and ``remote_ok``, else the database-backed :class:`~warrant.runner.client.api.Client`
    (``remote_ok=False``: commands the HTTP API has no equivalent of)."""
    if remote_ok:
        from warrant.runner.settings import WarrantSettings

        settings = WarrantSettings()
        if settings.server_url:
            from warrant.runner.client.remote import RemoteClient

            if not settings.api_token:
                raise TokenInvalid(
                    "WARRANT_SERVER_URL is set: WARRANT_API_TOKEN must name an API token"
                )
            return RemoteClient(settings.server_url, settings.api_token)
    from warrant.runner.client.api import Client

    return Client.from_env()
