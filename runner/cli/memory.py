"""``warrant memory ...``: long-term memory (preferences)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from warrant.runner.cli.common import ByOpt, JsonOpt, console, guard, make_client, print_json

__all__ = ["memory_app"]

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
