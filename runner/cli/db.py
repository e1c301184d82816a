"""``warrant db ...``: the ledger database."""

from __future__ import annotations

import typer

from warrant.broker.deps import setup_plugins
from warrant.ledger.migrate import upgrade
from warrant.runner.cli.common import JsonOpt, console, guard, print_json, settings_of
from warrant.runner.settings import resolved_urls

__all__ = ["db_app"]

db_app = typer.Typer(help="The ledger database.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Apply the ledger's Alembic migrations."""
    settings = settings_of(ctx)
    url = guard(as_json, lambda: resolved_urls(settings)[1])
    revision = guard(as_json, lambda: upgrade(url))
    plugins = guard(as_json, lambda: setup_plugins(url, settings))
    print_json({"revision": revision, "plugins_set_up": plugins}) if as_json else console.print(
        f"ledger at revision [bold]{revision}[/]"
        + (f"; set up: {', '.join(plugins)}" if plugins else "")
    )
