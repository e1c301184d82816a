"""``warrant policy ...`` and ``warrant run replay``: review a policy change against the
recorded runs (:mod:`warrant.runner.replay`), and approve a policy version before it decides
(``WARRANT_POLICY_APPROVAL=required``)."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from warrant.runner.cli.common import (
    JsonOpt,
    client_and_id,
    console,
    guard,
    make_client,
    print_json,
)
from warrant.runner.cli.runs import RunIdArg, parse_duration, run_app
from warrant.runner.codes import ErrorCode
from warrant.runner.errors import InvalidRequest

__all__ = ["policy_app"]

policy_app = typer.Typer(help="Policy review and approval.", no_args_is_help=True)

CandidateOpt = Annotated[
    Path | None,
    typer.Option(
        "--candidate",
        help="A policy candidate (JSON: contract changes by tool, settings); "
        "default: this process's policy.",
    ),
]


def read_candidate(path: Path | None) -> dict[str, Any] | None:
    """The candidate file's JSON object (``CANDIDATE_INVALID`` if unreadable or not one)."""
    if path is None:
        return None
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidRequest(
            f"cannot read the policy candidate {path}: {exc}", code=ErrorCode.CANDIDATE_INVALID
        ) from None
    if not isinstance(found, dict):
        raise InvalidRequest(
            f"the policy candidate {path} is not a JSON object", code=ErrorCode.CANDIDATE_INVALID
        )
    return found


@run_app.command("replay")
def run_replay(
    run_id: RunIdArg,
    candidate: CandidateOpt = None,
    by: Annotated[str | None, typer.Option("--by", help="Who replays (recorded).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Decide a run's recorded proposals again under today's policy (or a candidate's), the
    tools dry (nothing is executed): where today's decision differs, step by step. The
    replay is recorded as a run of kind ``replay``."""
    client, whole = client_and_id(as_json, run_id)
    found = guard(as_json, lambda: read_candidate(candidate))
    who = by or getpass.getuser()
    out = guard(as_json, lambda: client.replay_run(whole, candidate=found, by=who))
    if as_json:
        print_json(out)
        return
    table = Table("step", "tool", "recorded", "now", "change")
    for s in out["steps"]:
        step = f"{s['step']}.{s['branch']}" if s["branch"] else str(s["step"])
        change = s["change"] or ("[dim]unmodelled[/]" if s["unmodelled"] else "")
        table.add_row(step, str(s["tool"]), _shown(s["recorded"]), _shown(s["now"]), change)
    console.print(table)
    console.print(
        f"replay {out['replay_run_id']} of {out['source_run_id']} under {out['policy']}: "
        f"{out['changed']} of {len(out['steps'])} decision(s) would change; nothing executed"
    )


def _shown(decision: dict[str, Any]) -> str:
    code = decision.get("code")
    return f"{decision['decision']} {code}" if code else str(decision["decision"])


@policy_app.command("diff")
def policy_diff(
    since: Annotated[str, typer.Option(help="How far back: 90m, 24h, 7d.")] = "7d",
    candidate: CandidateOpt = None,
    limit: Annotated[int, typer.Option(help="At most this many runs, newest first.")] = 1000,
    as_json: JsonOpt = False,
) -> None:
    """Replay the recent runs under today's policy (or a candidate's): the decisions that
    would change, by tool and code, with their runs. Nothing is executed or recorded."""
    since_s = guard(as_json, lambda: parse_duration(since))
    found = guard(as_json, lambda: read_candidate(candidate))
    client = guard(as_json, make_client)
    out = guard(as_json, lambda: client.policy_diff(since_s=since_s, candidate=found, limit=limit))
    if as_json:
        print_json(out)
        return
    _print_decisions(out, since)


def _print_decisions(out: dict[str, Any], since: str) -> None:
    """``policy diff``'s report as a table and a summary line."""
    table = Table("tool", "change", "recorded", "now", "count", "runs")
    for c in out["changes"]:
        runs = ", ".join(r[:8] for r in c["runs"][:5]) + (" …" if len(c["runs"]) > 5 else "")
        table.add_row(
            c["tool"],
            c["change"],
            str(c["recorded_code"] or ""),
            str(c["code"] or ""),
            str(c["count"]),
            runs,
        )
    if out["changes"]:
        console.print(table)
    console.print(
        f"policy {out['policy']} over {out['runs']} run(s) since {since}: "
        f"{out['changed']} of {out['decisions']} decision(s) would change "
        f"in {out['runs_changed']} run(s)"
    )
    for failed in out.get("failed", []):
        console.print(f"[red]not replayed[/]: run {failed['run_id']}: {failed['error']}")


# -- The deployment policy's approval (``WARRANT_POLICY_APPROVAL=required``, G21): ``show`` this
# deployment's policy hash and whether it is approved, ``approve`` the hash an operator reviewed.


@policy_app.command("show")
def policy_show(as_json: JsonOpt = False) -> None:
    """This deployment's policy hash (every tool contract and the gate's settings), whether an
    operator approved it (who, when), and what changed since the latest approved one."""
    client = guard(as_json, make_client)
    out = guard(as_json, client.policy)
    if as_json:
        print_json(out)
        return
    approval = out["approval"]
    state = (
        f"[green]approved[/] by {approval['approved_by']} at {approval['approved_at']}"
        if approval
        else "[bold red]not approved[/]"
    )
    required = "required" if out["required"] else "off"
    console.print(f"policy {out['policy_hash']}: {state} (WARRANT_POLICY_APPROVAL={required})")
    form = out["form"]
    console.print(f"{len(form['contracts'])} tool contract(s); settings {form['settings']}")
    _print_diff(out["previous"], out["diff"])
    if not approval:
        console.print(f"approve it with `warrant policy approve {out['policy_hash']} --by NAME`")


@policy_app.command("approve")
def policy_approve(
    policy_hash: Annotated[str, typer.Argument(help="The hash `warrant policy show` printed.")],
    by: Annotated[str, typer.Option("--by", help="Who approves (recorded).")],
    note: Annotated[str | None, typer.Option(help="Why (recorded).")] = None,
    since: Annotated[
        str, typer.Option(help="Replay the runs of this window under the policy first.")
    ] = "7d",
    as_json: JsonOpt = False,
) -> None:
    """Approve this deployment's policy (POLICY_HASH_MISMATCH unless HASH is its hash): with
    WARRANT_POLICY_APPROVAL=required, policy workers under it decide from their next proposal
    on. Shows what changed since the latest approved policy and which recorded decisions of
    the last --since it would decide otherwise; approving again changes nothing."""
    since_s = guard(as_json, lambda: parse_duration(since))
    client = guard(as_json, make_client)
    decisions = guard(as_json, lambda: client.policy_diff(since_s=since_s))
    out = guard(as_json, lambda: client.approve_policy(policy_hash, by=by, note=note))
    if as_json:
        print_json({**out, "decisions": decisions})
        return
    _print_decisions(decisions, since)
    already = "" if out["changed"] else " (it already was)"
    console.print(
        f"policy {out['policy_hash']} approved{already} by {out['approved_by']} "
        f"at {out['approved_at']}"
    )
    _print_diff(out["previous"], out["diff"])


def _print_diff(previous: str | None, diff: dict[str, Any]) -> None:
    """What changed since the approved policy ``previous`` (None: the first approval)."""
    if previous is None:
        console.print(f"no policy approved before: {len(diff['tools_added'])} tool(s)")
        return
    console.print(f"since the approved policy {previous[:12]}:")
    for key, label in (("tools_added", "added"), ("tools_removed", "removed")):
        for name in diff[key]:
            console.print(f"  {label}: {name}")
    for changed in diff["tools_changed"]:
        fields = ", ".join(f"{f} {a} -> {b}" for f, (a, b) in changed["fields"].items())
        console.print(f"  changed: {changed['tool']} ({fields or 'other contract fields'})")
    for name, (was, now) in diff["settings_changed"].items():
        console.print(f"  setting {name}: {was} -> {now}")
    if not any(diff.values()):
        console.print("  nothing")
