"""``warrant handoff ...``: runs handed to a person; ``warrant memory ...``: long-term memory
(preferences). Both keep to the database when ``WARRANT_SERVER_URL`` is set."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Column, Table

from warrant.runner.cli.common import (
    ByOpt,
    JsonOpt,
    client_and_id,
    console,
    guard,
    make_client,
    print_json,
)
from warrant.runner.cli.runs import id_column

__all__ = ["bundle_lines", "handoff_app", "memory_app"]

HandoffIdArg = Annotated[
    str,
    typer.Argument(help="The handoff's id (or its run's), or a unique prefix (6+ chars)."),
]

handoff_app = typer.Typer(help="Runs handed to a person.", no_args_is_help=True)


@handoff_app.command("list")
def handoff_list(
    all_: Annotated[bool, typer.Option("--all", help="Include resolved handoffs.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Open handoffs (newest first)."""
    items = guard(as_json, lambda: make_client(remote_ok=False).handoffs(open_only=not all_))
    if as_json:
        print_json([{k: v for k, v in h.items() if k != "bundle"} for h in items])
        return
    table = Table(
        id_column("handoff_id"),
        id_column("run_id"),
        Column("reason", overflow="fold"),
        "created",
        "resolution",
    )
    for h in items:
        table.add_row(
            h["handoff_id"], h["run_id"], h["reason"], h["created_at"][:19], h["resolution"] or ""
        )
    console.print(table)


@handoff_app.command("show")
def handoff_show(handoff_id: HandoffIdArg, as_json: JsonOpt = False) -> None:
    """The whole bundle: state, goal, evidence (untrusted shown as data), pending proposal,
    unknown effects, artifacts made, budgets used and left, the trace pointer, actions."""
    client, whole = client_and_id(as_json, handoff_id, kind="handoff", remote_ok=False)
    h = guard(as_json, lambda: client.handoff(whole))
    if as_json:
        print_json(h)
        return
    console.print(
        f"[bold]handoff {escape(h['handoff_id'])}[/] run {escape(h['run_id'])} — "
        f"{escape(h['reason'])}"
    )
    for line in bundle_lines(h["bundle"]):
        console.print(line, markup=False, highlight=False)
    if h["resolution"]:
        console.print(f"resolved: {h['resolution']} by {h['resolved_by']}", markup=False)


def bundle_lines(b: dict[str, Any]) -> list[str]:
    """A bundle as plain lines (printed without markup: the ledger's text, the untrusted
    observations above all, is data). A bundle from before a field existed lacks it."""
    lines = [f"state: {b['state']}", f"goal: {b['goal']}", "last trusted observations:"]
    for o in b["last_trusted_observations"]:
        lines.append(f"  {o['observation_id']} [{o['source']}] {json.dumps(o['content'])[:100]}")
    lines.append("untrusted observations (data, never instructions):")
    for o in b.get("untrusted_observations") or []:
        lines.append(f"  {o['observation_id']} [{o['source']}] {o['content_json'][:100]!r}")
    if b.get("escalated"):
        said = b["escalated"].get("planner_said", "")
        lines.append(f"planner escalated (its words, data): {said[:200]!r}")
    lines += [f"pending proposal: {b['pending_proposal']}", f"required: {b['required']}"]
    lines.append("unknown effects:")
    for e in b["unknown_effects"]:
        history = [r["result"] for r in e["reconciliation_history"]]
        lines.append(f"  {e['tool']} step {e['step']} code {e['code']} history {history}")
    lines.append("artifacts made:")
    for a in b.get("artifacts") or []:
        lines.append(f"  step {a['step']} {a['tool']} {a['command_id']} ids {a['ids']}")
    if b.get("budget"):
        lines.append(f"budget remaining: {b['budget'].get('remaining')}")
    if b.get("trace"):
        lines.append(f"trace: {b['trace']['cli']} (up to seq {b['trace']['last_seq']})")
    for key in ("recommended_safe_actions", "forbidden_automatic_actions"):
        lines.append(key.replace("_", " ") + ":")
        lines += [f"  - {a}" for a in b[key]]
    return lines


@handoff_app.command("resolve")
def handoff_resolve(
    handoff_id: HandoffIdArg,
    outcome: Annotated[str, typer.Option(help="completed | failed | cancelled")],
    by: ByOpt,
    reason: Annotated[str, typer.Option(help="Why (recorded).")],
    as_json: JsonOpt = False,
) -> None:
    """End a handed-off run: a command through the state machine, with identity and reason."""
    client, whole = client_and_id(as_json, handoff_id, kind="handoff")
    info = guard(
        as_json,
        lambda: client.resolve_handoff(whole, outcome=outcome, by=by, reason=reason).to_dict(),
    )
    print_json(info) if as_json else console.print(
        f"run {info['run_id']}: {info['status']} ({info['stop_reason']})"
    )


memory_app = typer.Typer(help="Long-term memory (preferences).", no_args_is_help=True)


@memory_app.command("list")
def memory_list(
    subject: Annotated[str, typer.Option(help="Whose memory.")],
    all_: Annotated[bool, typer.Option("--all", help="Include revoked and expired.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Records of a subject (active only unless --all)."""
    records = guard(
        as_json,
        lambda: make_client(remote_ok=False).memory_records(subject, include_inactive=all_),
    )
    if as_json:
        print_json(records)
        return
    table = Table("id", "key", "value", "version", "source", "expires", "active")
    for r in records:
        table.add_row(
            str(r["id"]),
            r["key"],
            r["value"],
            str(r["version"]),
            r["source"],
            (r["expires_at"] or "")[:10],
            "yes" if r["active"] else "no",
        )
    console.print(table)


@memory_app.command("revoke")
def memory_revoke(record_id: int, by: ByOpt, as_json: JsonOpt = False) -> None:
    """Revoke a record: it is never returned to a planner again."""
    out = guard(as_json, lambda: make_client(remote_ok=False).revoke_memory(record_id, by=by))
    print_json(out) if as_json else console.print(f"revoked {record_id} ({out['key']})")
