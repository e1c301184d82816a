"""The administrators' commands, which work on the ledger database directly (no token needed).

``warrant ledger ...``: retention of the ledger. ``prune`` removes finished runs and all their
rows in short batches (optionally archiving them first), ``restore`` puts archived runs back,
``verify`` checks the trace's hash chain. ``warrant token ...``: API tokens of the HTTP API.
``warrant gate report``: what the gate would have refused in observe mode
(``WARRANT_OBSERVE_TOOLS``), by code and tool (``docs/observe-mode.md``)."""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from warrant.ledger.db import engine_for
from warrant.runner.cli.common import JsonOpt, console, err, guard, print_json, settings_of
from warrant.runner.cli.runs import id_column
from warrant.runner.client import ledger_verify as lv
from warrant.runner.client import retention
from warrant.runner.client.gate_report import gate_report as read_report
from warrant.runner.client.tokens import Tokens
from warrant.runner.settings import resolved_urls

__all__ = ["gate_app", "ledger_app", "token_app"]

ledger_app = typer.Typer(
    help="Retention (prune finished runs, restore them) and tamper evidence (verify).",
    no_args_is_help=True,
)


def _engine(ctx: typer.Context) -> Any:
    return engine_for(resolved_urls(settings_of(ctx))[1])


@contextmanager
def _progress(as_json: bool, what: str) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on a terminal (never with ``--json``: stdout is one document)."""
    if as_json or not sys.stdout.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(what, total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield advance


def _rows(rows: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in rows.items() if n) or "no rows"


@ledger_app.command("prune")
def ledger_prune(
    ctx: typer.Context,
    finished_before: Annotated[
        str,
        typer.Option(
            "--finished-before",
            help="Cutoff: an ISO 8601 date or datetime (UTC unless it says), or an age: 30d, 12h.",
        ),
    ],
    archive: Annotated[
        Path | None,
        typer.Option("--archive", help="Append the runs to this gzip JSON-lines file first."),
    ] = None,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=100_000, help="Runs per transaction.")
    ] = 500,
    as_json: JsonOpt = False,
) -> None:
    """Remove completed, failed and cancelled runs that finished before the cutoff, with
    every row they own (never a run that waits for a person, reconciles, runs or has an open
    handoff; never long-term memory)."""
    cutoff = guard(as_json, lambda: retention.parse_cutoff(finished_before))
    with _progress(as_json, "pruning runs") as on_progress:
        summary = guard(
            as_json,
            lambda: retention.prune(
                _engine(ctx), cutoff, archive=archive, batch=batch, on_progress=on_progress
            ),
        )
    print_json(summary) if as_json else console.print(
        f"pruned [bold]{summary['runs_pruned']}[/] runs finished before {summary['cutoff']}"
        f" in {summary['seconds']}s ({_rows(summary['rows'])})"
        + (f"; archived to {summary['archive']}" if summary["archive"] else "")
    )


@ledger_app.command("restore")
def ledger_restore(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="An archive written by `ledger prune --archive`.")],
    as_json: JsonOpt = False,
) -> None:
    """Put the runs of an archive back. A run that exists is skipped (and counted): restoring
    twice changes nothing."""
    with _progress(as_json, "restoring runs") as on_progress:
        summary = guard(
            as_json, lambda: retention.restore(_engine(ctx), file, on_progress=on_progress)
        )
    print_json(summary) if as_json else console.print(
        f"restored [bold]{summary['runs_restored']}[/] runs, skipped {summary['runs_skipped']}"
        f" that exist, in {summary['seconds']}s ({_rows(summary['rows'])})"
        + ("; the archive ends in a torn batch (never deleted)" if summary["truncated"] else "")
    )


@ledger_app.command("verify")
def ledger_verify(
    ctx: typer.Context,
    run: Annotated[
        str | None, typer.Option("--run", help="Only this run (an id or a unique prefix).")
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option("--archive", help="Check this prune archive against its anchors instead."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check the trace's hash chain of every run (or one) and the prune anchors; exit 1 with
    LEDGER_TAMPERED naming the run, the seq and the kind of the first broken link."""
    with _progress(as_json, "verifying runs") as on_progress:
        summary = guard(
            as_json,
            lambda: (
                lv.verify(_engine(ctx), run, on_progress=on_progress)
                if archive is None
                else lv.verify_archive(_engine(ctx), archive, on_progress=on_progress)
            ),
        )
    if as_json:
        print_json(summary)
        return
    what = f"archive {archive}" if archive is not None else (f"run {run}" if run else "ledger")
    console.print(
        f"{what}: intact — {summary['runs_checked']} runs, {summary['records_checked']} records,"
        f" {summary['anchors_checked']} prune anchors checked in {summary['seconds']}s"
    )


# -- warrant gate report ------------------------------------------------------------------------

gate_app = typer.Typer(help="The policy gate: observe mode's report.", no_args_is_help=True)


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


# -- warrant token ------------------------------------------------------------------------------

token_app = typer.Typer(
    help="API tokens (producer, approver, operator, viewer).", no_args_is_help=True
)

AdminOpt = Annotated[
    str | None,
    typer.Option("--by", help="Who does it (recorded); default: cli:<login name>."),
]


def _tokens(ctx: typer.Context) -> Any:
    return Tokens(_engine(ctx))


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
    token: Annotated[str, typer.Argument(help="The token's id or name (from `token list`).")],
    by: AdminOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a token, by its id or its name: it is refused from now on."""
    record = guard(as_json, lambda: _tokens(ctx).revoke(token, by=_admin(by)))
    shown = f"revoked {record['token_id']} ({record['name']})"
    print_json(record) if as_json else console.print(shown)
