"""``warrant tools ...``: the tool contracts, and whether the workers agree on them."""

from __future__ import annotations

import getpass
from typing import Annotated, Any

import typer
from rich.table import Table

from warrant.ledger.db import engine_for
from warrant.ledger.workers import LIVE_WITHIN_S, live_workers
from warrant.runner.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    console,
    guard,
    make_client,
    print_json,
    settings_of,
)
from warrant.runner.confirmation_rules import required_policy
from warrant.runner.settings import resolved_urls
from warrant.tools._deployment import WorkerInfo, disagreements, unserved
from warrant.tools._plugins import registry_for

__all__ = ["tools_app"]

tools_app = typer.Typer(help="Tool contracts.", no_args_is_help=True)

SwitchedBy = Annotated[
    str | None,
    typer.Option("--by", help="Who switches it (recorded; default: your login name)."),
]


@tools_app.command("list")
def tools_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every tool contract, with JSON Schemas in the shape MCP uses."""
    settings = settings_of(ctx)
    registry = guard(as_json, lambda: registry_for(settings))
    relaxed = settings.relaxed_tools
    tools = []
    for tool in registry:
        policy, why = required_policy(tool, relaxed=relaxed, flagged=False)
        effective = {"confirmationEffective": policy.value, "confirmationWhy": why}
        extra = {"source": registry.source_of(tool), "warnings": tool.warnings}
        tools.append({**tool.describe(), **effective, **extra})
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
            _confirmation_cell(t),
            ", ".join(t["requiredCapabilities"]),
            f"{t['timeoutSeconds']}s",
            t["source"],
        )
    console.print(table)
    _print_warnings([w for t in tools for w in t["warnings"]])
    console.print(f"registry fingerprint {registry.fingerprint[:12]}")


def _print_warnings(warnings: list[dict[str, str]]) -> None:
    for w in warnings:
        console.print(f"[yellow]warning[/] {w['code']}: {w['message']}")


@tools_app.command("check")
def tools_check(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Do the running workers (and this process) agree on the tool set, and does a worker
    consume every tool's queue? Exit 1 if not."""
    settings = settings_of(ctx)
    registry = guard(as_json, lambda: registry_for(settings))
    url = guard(as_json, lambda: resolved_urls(settings)[1])
    workers = guard(as_json, lambda: live_workers(engine_for(url), seen_within_s=LIVE_WITHIN_S))
    here = WorkerInfo(
        node="(this process)",
        roles=("cli",),
        queues=(),
        fingerprint=registry.fingerprint,
        tools=frozenset(registry.keys()),
    )
    problems = disagreements([*workers, here])
    idle = unserved(workers, registry.names())
    report = {
        "ok": not problems and not idle,
        "fingerprint": registry.fingerprint,
        "workers": [
            {
                "node": w.node,
                "process": w.process,
                "pid": w.pid,
                "roles": list(w.roles),
                "queues": list(w.queues),
                "fingerprint": w.fingerprint,
                "tools": sorted(w.tools),
            }
            for w in workers
        ],
        "disagreements": problems,
        "unserved": idle,
        "warnings": [w for t in registry for w in t.warnings],
    }
    if as_json:
        print_json(report)
    else:
        _print_check(report, registry.fingerprint)
    if not report["ok"]:
        raise typer.Exit(EXIT_FAILED)


def _print_check(report: dict[str, Any], fingerprint: str) -> None:
    table = Table("node", "pid", "roles", "fingerprint", "tools")
    for w in report["workers"]:
        table.add_row(
            w["node"],
            str(w["pid"]),
            ", ".join(w["roles"]),
            w["fingerprint"][:12],
            str(len(w["tools"])),
        )
    console.print(table)
    for p in report["disagreements"]:
        console.print(f"[red]disagree[/]: {p}")
    _print_warnings(report["warnings"])
    if report["unserved"]:
        console.print(
            f"[red]no worker[/] consumes the queue of: {', '.join(report['unserved'])} "
            "(start `warrant worker --role tool`)"
        )
    if report["ok"]:
        console.print(
            f"[green]agree[/]: {len(report['workers'])} worker(s), fingerprint {fingerprint[:12]}"
        )


@tools_app.command("disable")
def tools_disable(
    name: Annotated[str, typer.Argument(help="The tool's name (every version).")],
    reason: Annotated[str, typer.Option(help="Why (recorded with the change).")] = "",
    by: SwitchedBy = None,
    as_json: JsonOpt = False,
) -> None:
    """The kill switch: refuse every call of the tool (TOOL_DISABLED) from the gate's next
    decision on, on every worker; a command already issued for it that has not started is
    refused at its claim, the tool never called."""
    who = by or getpass.getuser()
    out = guard(as_json, lambda: make_client().disable_tool(name, by=who, reason=reason))
    _print_switch(out, as_json)


@tools_app.command("enable")
def tools_enable(
    name: Annotated[str, typer.Argument(help="The tool's name.")],
    by: SwitchedBy = None,
    as_json: JsonOpt = False,
) -> None:
    """Let the tool's calls through the gate again, from its next decision on."""
    who = by or getpass.getuser()
    out = guard(as_json, lambda: make_client().enable_tool(name, by=who))
    _print_switch(out, as_json)


def _print_switch(out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(out)
        return
    state = "disabled" if out["disabled"] else "enabled"
    already = "" if out["changed"] else " (it already was)"
    console.print(f"{out['tool']}: {state}{already}, by {out['by']} at {out['at']}")


def _confirmation_cell(t: dict[str, Any]) -> str:
    """The confirmation a call needs; a deployment's relaxation stands out."""
    if t["confirmationWhy"] == "relaxed":
        return f"[bold red]{t['confirmationEffective']} (relaxed by deployment)[/]"
    if t["confirmationWhy"] == "side-effect":
        return f"{t['confirmationEffective']} (side effect)"
    return str(t["confirmationEffective"])
