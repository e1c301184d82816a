"""``warrant token ...``: API tokens of the HTTP API. For administrators: these commands work
on the ledger database directly (no token needed)."""

from __future__ import annotations

import getpass
from typing import Annotated, Any

import typer
from rich.table import Table

from warrant.ledger.db import engine_for
from warrant.runner.cli.common import JsonOpt, console, err, guard, print_json, settings_of
from warrant.runner.cli.runs import id_column
from warrant.runner.client.tokens import Tokens
from warrant.runner.settings import resolved_urls

__all__ = ["token_app"]

token_app = typer.Typer(
    help="API tokens (producer, approver, operator, viewer).", no_args_is_help=True
)

AdminOpt = Annotated[
    str | None,
    typer.Option("--by", help="Who does it (recorded); default: cli:<login name>."),
]


def _tokens(ctx: typer.Context) -> Any:
    return Tokens(engine_for(resolved_urls(settings_of(ctx))[1]))


def _admin(by: str | None) -> str:
    if by and by.strip():
        return by.strip()
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Whose token (a person or a service).")],
    role: Annotated[str, typer.Option(help="producer, approver, operator or viewer.")],
    by: AdminOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a token. Its text is printed once: the ledger keeps only its hash."""
    token, record = guard(as_json, lambda: _tokens(ctx).create(name, role, created_by=_admin(by)))
    if as_json:
        print_json({**record, "token": token})
        return
    console.print(f"token [bold]{record['token_id']}[/] for {record['name']} ({record['role']})")
    err.print("the token is shown once; store it now:")
    console.print(token, soft_wrap=True)


@token_app.command("list")
def token_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every token, revoked ones too (never the tokens themselves)."""
    records = guard(as_json, lambda: _tokens(ctx).list())
    if as_json:
        print_json(records)
        return
    table = Table(id_column("id"), "name", "role", "created by", "created", "last used", "revoked")
    for r in records:
        table.add_row(
            r["token_id"],
            r["name"],
            r["role"],
            r["created_by"],
            r["created_at"][:19],
            (r["last_used_at"] or "")[:19],
            (r["revoked_at"] or "")[:19],
        )
    console.print(table)


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    token_id: Annotated[str, typer.Argument(help="The token's id (from `token list`).")],
    by: AdminOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a token: it is refused from now on."""
    record = guard(as_json, lambda: _tokens(ctx).revoke(token_id, by=_admin(by)))
    print_json(record) if as_json else console.print(f"revoked {token_id} ({record['name']})")
