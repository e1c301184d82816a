"""``warrant tools ...``: the tool contracts, and whether the workers agree on them."""

from __future__ import annotations

import typer
from rich.table import Table

from warrant.runner.client.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    console,
    guard,
    print_json,
)

__all__ = ["tools_app"]

tools_app = typer.Typer(help="Tool contracts.", no_args_is_help=True)


@tools_app.command("list")
def tools_list(as_json: JsonOpt = False) -> None:
    """Every tool contract, with JSON Schemas in the shape MCP uses."""
    from warrant.tools.plugins import registry_for

    registry = guard(as_json, registry_for)
    tools = [{**t.describe(), "source": registry.source_of(t)} for t in registry]
    if as_json:
        print_json({"tools": tools, "fingerprint": registry.fingerprint})
        return
    table = Table(
        "name", "version", "side effect", "confirmation", "capabilities", "timeout", "source"
    )
    for t in tools:
        table.add_row(
            t["name"],
            t["version"],
            t["sideEffect"],
            t["confirmation"],
            ", ".join(t["requiredCapabilities"]),
            f"{t['timeoutSeconds']}s",
            t["source"],
        )
    console.print(table)
    console.print(f"registry fingerprint {registry.fingerprint[:12]}")


@tools_app.command("check")
def tools_check(as_json: JsonOpt = False) -> None:
    """Do the running workers (and this process) agree on the tool set? Exit 1 if not."""
    from warrant.broker.registration import LIVE_WITHIN_S
    from warrant.ledger.db import engine_for
    from warrant.ledger.workers import live_workers
    from warrant.runner.settings import resolved_urls
    from warrant.tools.deployment import WorkerInfo, disagreements
    from warrant.tools.plugins import registry_for

    registry = guard(as_json, registry_for)
    url = guard(as_json, lambda: resolved_urls()[1])
    workers = guard(as_json, lambda: live_workers(engine_for(url), seen_within_s=LIVE_WITHIN_S))
    here = WorkerInfo(
        node="(this process)",
        roles=("cli",),
        queues=(),
        fingerprint=registry.fingerprint,
        tools=frozenset(registry.keys()),
    )
    problems = disagreements([*workers, here])
    report = {
        "ok": not problems,
        "fingerprint": registry.fingerprint,
        "workers": [
            {
                "node": w.node,
                "roles": list(w.roles),
                "fingerprint": w.fingerprint,
                "tools": sorted(w.tools),
            }
            for w in workers
        ],
        "disagreements": problems,
    }
    if as_json:
        print_json(report)
    else:
        table = Table("node", "roles", "fingerprint", "tools")
        for w in report["workers"]:
            table.add_row(
                w["node"], ", ".join(w["roles"]), w["fingerprint"][:12], str(len(w["tools"]))
            )
        console.print(table)
        for p in problems:
            console.print(f"[red]disagree[/]: {p}")
        if not problems:
            console.print(
                f"[green]agree[/]: {len(workers)} worker(s), fingerprint "
                f"{registry.fingerprint[:12]}"
            )
    if problems:
        raise typer.Exit(EXIT_FAILED)
