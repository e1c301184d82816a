"""``warrant handoff ...``: runs handed to a person; ``warrant memory ...``: long-term memory
(preferences). Both keep to the database when ``WARRANT_SERVER_URL`` is set."""

from __future__ import annotations

import json
from typing import Annotated

import typer
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

__all__ = ["handoff_app", "memory_app"]

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
    """The whole bundle: state, goal, evidence, pending proposal, unknown effects, actions."""
    client, whole = client_and_id(as_json, handoff_id, kind="handoff", remote_ok=False)
    h = guard(as_json, lambda: client.handoff(whole))
    if as_json:
        print_json(h)
        return
    b = h["bundle"]
    console.print(f"[bold]handoff {h['handoff_id']}[/] run {h['run_id']} — {h['reason']}")
    console.print(f"state: {b['state']}")
    console.print(f"goal: {b['goal']}")
    console.print("last trusted observations:")
    for o in b["last_trusted_observations"]:
        console.print(f"  {o['observation_id']} [{o['source']}] {json.dumps(o['content'])[:100]}")
    console.print(f"pending proposal: {b['pending_proposal']}")
    console.print(f"required: {b['required']}")
    console.print("unknown effects:")
    for e in b["unknown_effects"]:
        console.print(
            f"  {e['tool']} step {e['step']} code {e['code']} "
            f"history {[r['result'] for r in e['reconciliation_history']]}"
        )
    for key in ("recommended_safe_actions", "forbidden_automatic_actions"):
        console.print(key.replace("_", " ") + ":")
        for a in b[key]:
            console.print(f"  - {a}")
    if h["resolution"]:
        console.print(f"resolved: {h['resolution']} by {h['resolved_by']}")


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
