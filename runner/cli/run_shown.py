"""How ``warrant run show`` reads and prints a run: why it stopped or what it waits for, its
fields, its pre-approvals and the confirmation request it waits for (with where each argument
came from and what the tool's service says of its resources). Untrusted text is printed as
data, never as markup.

Why, read off the run's state and trace (what ``run show`` leads with, and its ``--json``
``why`` object, beside the other facts of :func:`trace_facts`): the stop reason alone can hide
the cause. A plan that calls an unknown tool is refused at the gate
(``UNKNOWN_TOOL_OR_VERSION``), the planner goes on, and the run ends with
``FINAL_CITATION_VALIDATION_FAILED``. So the last refusal (the newest trace event carrying a
``code``: a gate rejection, a failed tool call, a model failure) is shown beside it.

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
from warrant.runner.confirmation_rules import undecided
from warrant.runner.observe import WOULD_REFUSE, would_refusals
from warrant.runner.provenance import flag_reason
from warrant.tools._contract import IMPACT_NOT_DECLARED

if TYPE_CHECKING:
    from warrant.runner.client.contract import RunnerClient

__all__ = [
    "RevealByOpt",
    "RevealOpt",
    "last_refusal",
    "local_user",
    "parallel_steps",
    "policy_versions",
    "reveal_note",
    "revealed",
    "show_run",
    "trace_facts",
    "waiting_for",
    "why",
    "why_lines",
]


def trace_facts(data: dict[str, Any], trace: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``run show`` and ``run start --wait`` add to a run from its trace: ``why`` it
    stopped or waits, the ``policy_versions`` of its decisions and the calls observe mode
    let through (``would_refuse``)."""
    return {
        "why": why(data, trace),
        "policy_versions": policy_versions(trace),
        "would_refuse": would_refusals(trace),
        "parallel_steps": parallel_steps(trace),
    }


def parallel_steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's parallel steps, from their ``step.merged`` events: ``step``, ``verdict``,
    ``summary``, ``missing`` and each ``branches`` entry (call, tool, source, status, code)."""
    return [
        {"step": e.get("step"), **(e.get("details") or {})}
        for e in events
        if e.get("event") == "step.merged"
    ]


def policy_versions(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Which policy decided each step, read off the run's ``policy.versioned`` trace events:
    one entry per gate decision, in order: ``step``, ``proposal_id``, ``decision``
    (``accepted``, ``refused``, ``needs_confirmation``, ``halted``), ``policy_version`` and
    the hashes of its parts (``contract_hash``, ``grants_hash``, ``settings_hash``)."""
    return [
        {"step": e.get("step"), "proposal_id": e.get("proposal_id"), **(e.get("details") or {})}
        for e in events
        if e.get("event") == "policy.versioned"
    ]


#: The planner stage's failure event (the run's stop reason already names it).
MODEL_FAILED = "model.failed"


def last_refusal(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest event with a ``code`` in its details: ``event``, ``code``, ``message``,
    ``step``, ``seq`` (``None``: nothing was refused). A refusal observe mode let through
    (``gate.would_refuse`` and the layer's event before it) is none. A planner's failure
    (``model.failed``: the run's stop reason says it already) is shown only when nothing was
    refused before it: a fixture planner that ran out after its calls were refused
    ``UNKNOWN_TOOL_OR_VERSION`` is summed up by that refusal, not by
    ``FIXTURE_PLANNER_EXHAUSTED`` with an empty message."""
    coded = _refusals(events)
    chosen = next((e for e in coded if e["event"] != MODEL_FAILED), None)
    return chosen or (coded[0] if coded else None)


def _refusals(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events carrying a code, newest first, without those observe mode let through."""
    found: list[dict[str, Any]] = []
    let_through: set[str] = set()  # observe mode: refusals it let through are no refusals
    for e in reversed(events):
        details = e.get("details") or {}
        code = details.get("code")
        if e.get("event") == WOULD_REFUSE:
            let_through.add(str(code))
            continue
        if code in let_through:  # the layer's own event of that refusal
            let_through.discard(code)
            continue
        if isinstance(code, str) and code:
            message = details.get("message") or details.get("reason") or _describe(details)
            found.append(
                {
                    "event": e["event"],
                    "code": code,
                    "message": str(message),
                    "step": e.get("step"),
                    "seq": e.get("seq"),
                }
            )
    return found


def _describe(details: dict[str, Any]) -> str:
    keys = ("layer", "tool", "status", "attempt", "error", "detail")
    return ", ".join(f"{k}={details[k]}" for k in keys if details.get(k) is not None)


def waiting_for(info: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a person must do for the run to go on (``None``: nothing; it moves or ended)."""
    run_id, status = info["run_id"], info["status"]
    if status == "waiting_confirmation":
        request = info.get("confirmation_request") or {}
        proposal_hash = request.get("proposal_hash")
        return {
            "kind": "confirmation",
            "tool": request.get("tool"),
            "proposal_hash": proposal_hash,
            "expires_at": request.get("expires_at"),
            "command": _decide_line(run_id, request).strip(),
            **({"calls": undecided(request)} if request.get("parallel") else {}),
        }
    if status == "waiting_grant":
        grant = info.get("waiting_for_grant") or {}
        resources = [str(r) for r in grant.get("resources") or []]
        scope = resources[0] if len(resources) == 1 else "SCOPE"
        return {
            "kind": "grant",
            "tool": grant.get("tool"),
            "capability": grant.get("capability"),
            "resources": resources,
            "step": grant.get("step"),
            "proposal_hash": grant.get("proposal_hash"),
            "command": f"warrant run grant {run_id} --capability {grant.get('capability')} "
            f"--scope {scope} --by NAME",
        }
    if status == "needs_input":
        return {
            "kind": "answer",
            "question": info.get("answer"),
            "command": f'warrant run answer {run_id} --text "..." --by NAME',
        }
    if status == "handoff":
        created = [e for e in events if e["event"] == "handoff.created"]
        handoff = (created[-1].get("details") or {}).get("handoff_id") if created else None
        return {
            "kind": "handoff",
            "handoff_id": handoff,
            "command": f"warrant handoff show {handoff or run_id}",
        }
    return None


def why(info: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """``status``, ``stop_reason``, ``last_refusal`` and ``waiting_for`` of the run, and
    ``unverified_success``: the success conditions its completion holds on an unverified
    write's word only (``final.validated``'s ``unverified``; None when there are none)."""
    validated = [e for e in events if e["event"] == "final.validated"]
    flagged = (validated[-1].get("details") or {}).get("unverified") if validated else None
    return {
        "status": info["status"],
        "stop_reason": info.get("stop_reason"),
        "last_refusal": last_refusal(events),
        "waiting_for": waiting_for(info, events),
        "unverified_success": flagged or None,
    }


def why_lines(reason: dict[str, Any]) -> list[str]:
    """The same, for people: one line each (plain text, no markup)."""
    stop = reason["stop_reason"]
    lines = [f"{reason['status']}" + (f": {stop}" if stop else " (no stop reason yet)")]
    refusal = reason["last_refusal"]
    if refusal is not None:
        lines.append(
            f"last refusal: {refusal['code']} at step {refusal['step']} "
            f"({refusal['event']}): {refusal['message']}"
        )
    for flagged in reason.get("unverified_success") or []:
        lines.append(
            f"success condition {flagged['index']} ({flagged['tool']}) holds on the tool's "
            "word only: an unverified write, nothing read it back"
        )
    wait = reason["waiting_for"]
    if wait is not None:
        subject = {
            "confirmation": f"a person to confirm {wait.get('tool')}",
            "answer": f"an answer to: {wait.get('question')}",
            "handoff": f"a person to resolve handoff {wait.get('handoff_id')}",
            "grant": f"a grant of {wait.get('capability')} for {wait.get('tool')} on "
            f"{', '.join(wait.get('resources') or []) or '?'} (proposal "
            f"{str(wait.get('proposal_hash'))[:12]}, step {wait.get('step')})",
        }[wait["kind"]]
        lines.append(f"waits for {subject}")
        if wait["kind"] != "confirmation":  # `run show` prints the request and its command
            lines.append(f"  {wait['command']}")
    return lines


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
    if info.get("parent_run_id"):
        table.add_row("[bold]parent_run_id[/]", escape(str(info["parent_run_id"])))
    console.print(table)
    _show_children(info.get("children") or [])
    _show_made(info.get("budget_stop"))
    for w in info.get("would_refuse") or []:  # observe mode let these through: loud
        said = f"step {w['step']} {w['tool']}: {w['code']} ({w['layer']})"
        console.print(f"[bold red]observe mode let through[/] {escape(said)}", soft_wrap=True)
    for merged in info.get("parallel_steps") or []:
        table = Table("call", "tool", "source", "status", "code", title=merged["summary"])
        for b in merged.get("branches") or []:
            status = b["status"] + (f" ({b['cancelled']})" if b.get("cancelled") else "")
            table.add_row(
                f"{merged['step']}.{b['branch']}",
                str(b.get("tool") or ""),
                str(b.get("source") or ""),
                status,
                str(b.get("code") or ""),
            )
        console.print(table)
    if pre := info.get("pre_approvals"):
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
    _show_request(info)


def _show_made(budget_stop: dict[str, Any] | None) -> None:
    """A budget stop's artifacts: what the run had already made when the budget ran out."""
    if not budget_stop:
        return
    made = budget_stop.get("artifacts") or []
    console.print(f"[bold]already made[/] ({len(made)} succeeded effects):")
    for a in made:
        said = f"step {a['step']} {a['tool']} {a['command_id']} ids {a['ids']}"
        console.print(f"  {escape(said)}", soft_wrap=True, highlight=False)


def _show_children(children: list[dict[str, Any]]) -> None:
    """The sub-runs a run started (``delegate``; a router's branch with its route)."""
    if not children:
        return
    table = Table("sub-run", "status", "stop reason", "route")
    for child in children:
        route = child.get("route") or {}
        label = f"{route['label']} ({route.get('by')})" if route.get("label") else ""
        table.add_row(child["run_id"], child["status"], str(child.get("stop_reason") or ""), label)
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
    """``vouched by "Bob" (tool-1.messages[1])``, ``author of tool-1.messages[0]``, ``listed
    in tool-2``, ``untrusted (copied from tool-3)``, or the origin with what it means."""
    kind = str(origin.get("origin"))
    if kind == "vouched":
        return f"vouched by {origin.get('named_as')!r} ({origin.get('observation_id')})"
    if kind == "author":
        return f"author of {origin.get('observation_id')}"
    if kind == "listed":
        return f"listed in {origin.get('observation_id')}"
    if kind == "untrusted":
        return f"untrusted (copied from {origin.get('observation_id')})"
    return _ORIGIN_WORDS.get(kind, kind)


#: What the origins without an observation mean (docs/policy-gate.md, provenance).
_ORIGIN_WORDS = {
    "trusted": "trusted",
    "unchecked": "unchecked (free text the model wrote: it proves nothing either way)",
    "unseen": "unseen (nowhere the run read: the model made it up or knew it)",
}


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


def _decide_line(run_id: str, request: dict[str, Any]) -> str:
    """The command that decides what the run waits for: its proposal, or every undecided
    call of its parallel step at once."""
    if request.get("parallel"):
        hashes = " ".join(f"--approve {h}" for h in undecided(request))
        return f"  warrant run decide {run_id} {hashes} --by NAME"
    return (
        f"  warrant run confirm {run_id} --proposal-hash {request.get('proposal_hash')} --by NAME"
    )


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
            "estimated_impact",
            "proposal_hash",
        ):
            value = request.get(key)
            if key == "estimated_impact" and not value:
                value = IMPACT_NOT_DECLARED  # a request from before tools declared one
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
        calls = (request.get("parallel") or {}).get("calls") or []
        for c in calls:  # a parallel step: the set, each call that needs a person by its hash
            status = c.get("decision") or c.get("status")
            line = f"  call {c.get('branch')}: {c.get('tool')} {status}"
            if c.get("status") == "needs_person":
                line += f" ({approvals_line(c)}) hash {c.get('proposal_hash')}"
            console.print(escape(line), soft_wrap=True, highlight=False)
        console.print(  # one line whatever the width: it is copied and pasted
            _decide_line(info["run_id"], request), soft_wrap=True, highlight=False
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
