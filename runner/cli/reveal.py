"""``warrant run show --reveal``: the pending proposal's sensitive values, for a person who
may confirm it (``confirmation_request`` masks them as ``<sensitive>`` everywhere else).

On the database (an administrator's CLI) who looks is ``--by`` or the login name, from this
host; over ``WARRANT_SERVER_URL`` the server checks that the token's role may confirm (else
``REVEAL_FORBIDDEN``) and records the token's identity. Either way the run's trace gets a
``sensitive.revealed`` event (who, from where, which fields; never the values), written by
:meth:`~warrant.runner.client.inbox.InboxClient.reveal`."""

from __future__ import annotations

import getpass
import os
import socket
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from warrant.runner.client.contract import RunnerClient

__all__ = ["RevealByOpt", "RevealOpt", "local_user", "reveal_note", "revealed"]

RevealOpt = Annotated[
    bool,
    typer.Option(
        "--reveal",
        help="Show the pending proposal's sensitive values (who may confirm; traced as "
        "sensitive.revealed). --json: in `revealed`.",
    ),
]
RevealByOpt = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="Who looks, with --reveal (traced; default: your login name). Over "
        "WARRANT_SERVER_URL the token's identity is traced instead.",
    ),
]


def local_user() -> str:
    """The login name of who runs the command (``uid N`` when the system has none)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"


def revealed(client: RunnerClient, run_id: str, *, by: str | None) -> dict[str, Any] | None:
    """The run's pending proposal with its sensitive values (``None``: it waits for none)."""
    from warrant.runner.client.approvals import Origin  # lazy: SQLAlchemy; run list skips it

    where = Origin(via="cli", address=socket.gethostname())
    found = client.reveal(run_id, by=by or local_user(), origin=where)
    return found.to_dict() if found is not None else None


def reveal_note(info: dict[str, Any]) -> str | None:
    """The line ``run show --reveal`` prints under the request (``None`` without --reveal)."""
    if "revealed" not in info:
        return None
    shown = info["revealed"]
    request = info.get("confirmation_request") or {}
    if shown is None:
        return f"nothing to reveal: run {info['run_id']} waits for no confirmation"
    if shown["proposal_hash"] != request.get("proposal_hash"):
        return "the pending proposal changed while it was read: run `warrant run show` again"
    if not shown["fields"]:
        return "nothing to reveal: the proposal has no sensitive values"
    return f"revealed {', '.join(shown['fields'])} (traced as sensitive.revealed)"
