"""How ``warrant run show`` prints a run: its fields, its pre-approvals and the confirmation
request it waits for (with where each argument came from and what the tool's service says of
its resources). Untrusted text is printed as data, never as markup.

``--reveal`` adds the pending proposal's sensitive values, for a person who may confirm it
(``confirmation_request`` masks them as ``<sensitive>`` everywhere else). On the database (an
administrator's CLI) who looks is ``--by`` or the login name, from this host; over
``WARRANT_SERVER_URL`` the server checks that the token's role may confirm (else
``REVEAL_FORBIDDEN``) and records the token's identity. Either way the run's trace gets a
``sensitive.revealed`` event (who, from where, which fields; never the values), written by
:meth:`~warrant.runner.client.inbox.InboxClient.reveal`."""

from __future__ import annotations

import getpass
import os
import socket
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from warrant.runner.cli.common import console
from warrant.runner.cli.why import why_lines
from warrant.runner.provenance import flag_reason

if TYPE_CHECKING:
    from warrant.runner.client.contract import RunnerClient

__all__ = ["RevealByOpt", "RevealOpt", "local_user", "reveal_note", "revealed", "show_run"]


def show_run(info: dict[str, Any]) -> None:
    """One run for people: why it stopped or what it waits for first (``info["why"]``, if
    there), then its fields, pre-approvals and the pending confirmation request."""
    if info.get("why"):
        lines = why_lines(info["why"])
        console.print(f"[bold]why[/]: {escape(lines[0])}", soft_wrap=True)
        for line in lines[1:]:
            console.print(f"  {escape(line)}", soft_wrap=True, highlight=False)
    table = Table(show_header=False, box=None)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for key in (
        "run_id",
        "status",
        "stop_reason",
        "step",
        "model_calls",
        "tool_calls",
        "tokens_used",
        "cost_used",
        "version",
        "answer",
        "trace_id",
    ):
        if key == "trace_id" and not info.get(key):
            continue
        table.add_row(f"[bold]{key}[/]", "" if info[key] is None else escape(str(info[key])))
    console.print(table)
    for w in info.get("would_refuse") or []:  # observe mode let these through: loud
        said = f"step {w['step']} {w['tool']}: {w['code']} ({w['layer']})"
        console.print(f"[bold red]observe mode let through[/] {escape(said)}", soft_wrap=True)
    _show_pre_approvals(info)
    _show_request(info)


def _show_pre_approvals(info: dict[str, Any]) -> None:
    pre = info.get("pre_approvals") or []
    if pre:
        table = Table("pre-approved", "tool", "approved by", "used by proposal", "at")
        for p in pre:
            used = p["used_by_proposal"] or ("(used)" if p["used_at"] else "(unused)")
            table.add_row(
                str(p["pre_approval_id"]),
                f"{p['tool']}@{p['tool_version']}",
                p["approved_by"],
                used,
                (p["used_at"] or p["approved_at"])[:19],
            )
        console.print(table)


def _flag_line(flag: dict[str, Any]) -> str:
    """One flagged argument: its value, what it is, where it came from (untrusted text shown
    as data, never as markup)."""
    head = f"{flag['argument']}={flag['value']!r}"
    what = flag.get("what", "value")
    if what == "disclosed":
        where = flag_reason(flag)
    elif flag.get("origin", "untrusted") == "untrusted":
        where = f"appears only in untrusted content ({flag['observation_id']}): …{flag['excerpt']}…"
    else:
        where = "appears in nothing the user or a trusted tool said"
    return f"{head} ({what}) {where}"


def origin_words(origin: dict[str, Any]) -> str:
    """``vouched by "Bob" (tool-1.messages[1])``, ``author of tool-1.messages[0]``, or the
    bare origin."""
    kind = str(origin.get("origin"))
    if kind == "vouched":
        return f"vouched by {origin.get('named_as')!r} ({origin.get('observation_id')})"
    if kind == "author":
        return f"author of {origin.get('observation_id')}"
    return kind


def approvals_line(request: dict[str, Any]) -> str:
    """``"1 of 2 approvals: alice (approver)"`` (M of N, who has approved so far)."""
    names = [str(a.get("by")) for a in request.get("approved_by") or []]
    line = f"{len(names)} of {int(request.get('approvals_required') or 1)} approvals"
    return f"{line}: {', '.join(names)}" if names else line


def precondition_line(state: dict[str, Any]) -> str:
    """``"balance_cents=700, status=open (fingerprint 3f9c…)"``: the state the approval is
    bound to (``Tool.precondition``), or why it could not be read."""
    if not state.get("fingerprint"):
        return f"unreadable ({state.get('error')})"
    said = ", ".join(f"{k}={v}" for k, v in (state.get("summary") or {}).items())
    return f"{said} (fingerprint {str(state['fingerprint'])[:16]})"


def _show_request(info: dict[str, Any]) -> None:
    request = info.get("confirmation_request")
    note = reveal_note(info)
    if request:
        shown = info.get("revealed") or {}
        console.print("[bold yellow]confirmation required[/]")
        for key in (
            "action",
            "tool",
            "resource",
            "parameters",
            "side_effect",
            "reversible",
            "proposal_hash",
        ):
            value = request.get(key)
            if key == "parameters" and shown.get("proposal_hash") == request["proposal_hash"]:
                value = shown["arguments"]
            console.print(f"  {key}: {escape(str(value))}")
        provenance = request.get("provenance") or {}
        for flag in provenance.get("flagged", []):
            console.print(
                f"  [bold red]UNTRUSTED_ARGUMENT[/] {escape(_flag_line(flag))}", soft_wrap=True
            )
        origins = provenance.get("origins") or {}
        if origins:
            said = ", ".join(f"{path}: {origin_words(o)}" for path, o in origins.items())
            console.print(f"  origins: {escape(said)}", soft_wrap=True)
        for path, text in (request.get("described") or {}).items():
            console.print(f"  the service says, {escape(path)}: {escape(text)}", soft_wrap=True)
        if request.get("precondition"):
            line = precondition_line(request["precondition"])
            console.print(f"  state approved: {escape(line)}", soft_wrap=True)
        console.print(f"  approvals: {escape(approvals_line(request))}", soft_wrap=True)
        console.print(  # one line whatever the width: it is copied and pasted
            f"  warrant run confirm {info['run_id']} --proposal-hash "
            f"{request['proposal_hash']} --by NAME",
            soft_wrap=True,
            highlight=False,
        )
    if note:
        console.print(f"  [bold]{escape(note)}[/]" if request else escape(note))


RevealOpt = Annotated[
    bool,
    typer.Option(
        "--reveal",
        help="Show the pending proposal's sensitive values (who may confirm; traced as "
        "sensitive.revealed). --json: in `revealed`.",
    ),
]
RevealByOpt = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="Who looks, with --reveal (traced; default: your login name). Over "
        "WARRANT_SERVER_URL the token's identity is traced instead.",
    ),
]


def local_user() -> str:
    """The login name of who runs the command (``uid N`` when the system has none)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"


def revealed(client: RunnerClient, run_id: str, *, by: str | None) -> dict[str, Any] | None:
    """The run's pending proposal with its sensitive values (``None``: it waits for none)."""
    from warrant.runner.client.approvals import Origin  # lazy: SQLAlchemy; run list skips it

    where = Origin(via="cli", address=socket.gethostname())
    found = client.reveal(run_id, by=by or local_user(), origin=where)
    return found.to_dict() if found is not None else None


def reveal_note(info: dict[str, Any]) -> str | None:
    """The line ``run show --reveal`` prints under the request (``None`` without --reveal)."""
    if "revealed" not in info:
        return None
    shown = info["revealed"]
    request = info.get("confirmation_request") or {}
    if shown is None:
        return f"nothing to reveal: run {info['run_id']} waits for no confirmation"
    if shown["proposal_hash"] != request.get("proposal_hash"):
        return "the pending proposal changed while it was read: run `warrant run show` again"
    if not shown["fields"]:
        return "nothing to reveal: the proposal has no sensitive values"
    return f"revealed {', '.join(shown['fields'])} (traced as sensitive.revealed)"
