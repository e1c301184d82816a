"""``warrant db ...``: the ledger database."""

from __future__ import annotations

import typer

from warrant.broker.deps import setup_plugins
from warrant.ledger.migrate import upgrade
from warrant.runner.cli.common import JsonOpt, console, guard, print_json
from warrant.runner.settings import resolved_urls

__all__ = ["db_app"]

db_app = typer.Typer(help="The ledger database.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(as_json: JsonOpt = False) -> None:
    """Apply the ledger's Alembic migrations."""
    url = guard(as_json, lambda: resolved_urls()[1])
    revision = guard(as_json, lambda: upgrade(url))
    plugins = guard(as_json, lambda: setup_plugins(url))
    print_json({"revision": revision, "plugins_set_up": plugins}) if as_json else console.print(
        f"ledger at revision [bold]{revision}[/]"
        + (f"; set up: {', '.join(plugins)}" if plugins else "")
    )
