"""``warrant gate report``: what the gate would have refused in observe mode
(``WARRANT_OBSERVE_TOOLS``), by code and tool. See ``docs/observe-mode.md``."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from warrant.ledger.db import engine_for
from warrant.runner.cli.common import JsonOpt, console, guard, print_json, settings_of
from warrant.runner.client.gate_report import gate_report as read_report
from warrant.runner.settings import resolved_urls

__all__ = ["gate_app"]

gate_app = typer.Typer(help="The policy gate: observe mode's report.", no_args_is_help=True)


def _engine(ctx: typer.Context) -> Any:
    return engine_for(resolved_urls(settings_of(ctx))[1])


@gate_app.command("report")
def gate_report(
    ctx: typer.Context,
    since: Annotated[
        str | None,
        typer.Option("--since", help="From: an ISO 8601 date or datetime, or an age: 24h, 7d."),
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="Only this run (an id or a unique prefix).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Would-be refusals of observe mode (traced gate.would_refuse, let through), grouped by
    code and tool: counts, runs, first and last seen, example run ids."""
    summary = guard(as_json, lambda: read_report(_engine(ctx), since=since, run=run))
    if as_json:
        print_json(summary)
        return
    if not summary["groups"]:
        console.print("no would-be refusals (observe mode let nothing through)")
        return
    table = Table("code", "tool", "layer", "count", "runs", "first seen", "last seen", "examples")
    for g in summary["groups"]:
        table.add_row(
            g["code"],
            escape(str(g["tool"])),
            g["layer"],
            str(g["count"]),
            str(g["runs"]),
            g["first_seen"][:19],
            g["last_seen"][:19],
            ", ".join(g["example_runs"]),
        )
    console.print(table)
    console.print(f"[bold yellow]{summary['total']}[/] calls observe mode let through")
