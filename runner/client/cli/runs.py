"""``warrant run ...``: start, inspect and steer runs."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from warrant.runner.client.cli.common import (
    EXIT_FAILED,
    ByOpt,
    JsonOpt,
    console,
    fail,
    guard,
    make_client,
    print_json,
)
from warrant.runner.errors import InvalidRequest, SpecError

__all__ = ["run_app"]

run_app = typer.Typer(help="Start, inspect and steer runs.", no_args_is_help=True)


def _show_run(info: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None)
    for key in (
        "run_id",
        "status",
        "stop_reason",
        "step",
        "model_calls",
        "tool_calls",
        "version",
        "answer",
    ):
        table.add_row(f"[bold]{key}[/]", "" if info[key] is None else str(info[key]))
    console.print(table)
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
    request = info.get("confirmation_request")
    if request:
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
            console.print(f"  {key}: {request.get(key)}")
        for flag in (request.get("provenance") or {}).get("flagged", []):
            console.print(
                f"  [bold red]UNTRUSTED_ARGUMENT[/] {flag['argument']}={flag['value']!r} appears "
                f"only in untrusted content ({flag['observation_id']}): …{flag['excerpt']}…"
            )
        console.print(
            f"  warrant run confirm {info['run_id']} --proposal-hash "
            f"{request['proposal_hash']} --by NAME"
        )


@run_app.command("start")
def run_start(
    spec_file: Annotated[Path, typer.Argument(help="Run spec JSON file ('-' for stdin).")],
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the run settles.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait with --wait.")] = 120.0,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Start at most once: the same key again returns the same run."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate a run spec, record the run and enqueue its first planner step."""
    from warrant.runner.spec import parse_run_spec

    try:
        text = sys.stdin.read() if str(spec_file) == "-" else spec_file.read_text()
    except OSError as exc:
        fail(
            SpecError(
                f"cannot read {spec_file}: {exc.strerror}",
                errors=[{"field": "SPEC_FILE", "message": str(exc.strerror)}],
            ),
            as_json,
        )

    def go() -> dict[str, Any]:
        spec = parse_run_spec(text)
        client = make_client()
        run_id = client.start_run(spec, idempotency_key=idempotency_key)
        if not wait:  # a repeated key's run may have moved on: read its status
            status = client.get_run(run_id).status if idempotency_key else "running"
            return {"run_id": run_id, "status": status}
        with console.status(f"run {run_id} …", spinner="dots") if not as_json else nullcontext():
            return client.wait(run_id, timeout=timeout).to_dict()

    result = guard(as_json, go)
    if as_json:
        print_json(result)
    elif "goal" in result:
        _show_run(result)
    else:
        console.print(f"started [bold]{result['run_id']}[/]")
    if wait and result.get("status") not in ("completed",):
        raise typer.Exit(EXIT_FAILED)


@run_app.command("show")
def run_show(run_id: str, as_json: JsonOpt = False) -> None:
    """Status, stop reason, counters, version and answer of one run."""
    info = guard(as_json, lambda: make_client().get_run(run_id).to_dict())
    print_json(info) if as_json else _show_run(info)


@run_app.command("list")
def run_list(
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    as_json: JsonOpt = False,
) -> None:
    """The most recent runs."""
    runs = guard(
        as_json, lambda: [r.to_dict() for r in make_client().list_runs(limit=limit, status=status)]
    )
    if as_json:
        print_json(runs)
        return
    table = Table("run_id", "status", "stop_reason", "step", "tools", "created")
    for r in runs:
        table.add_row(
            r["run_id"],
            r["status"],
            r["stop_reason"] or "",
            str(r["step"]),
            str(r["tool_calls"]),
            r["created_at"][:19],
        )
    console.print(table)


@run_app.command("trace")
def run_trace(run_id: str, as_json: JsonOpt = False) -> None:
    """The run's timeline: ordered events, stop reason and budget snapshot."""

    def go() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        client = make_client()
        return client.get_run(run_id).to_dict(), client.trace(run_id)

    info, events = guard(as_json, go)
    if as_json:
        print_json(events)
        return
    from datetime import datetime

    console.print(
        f"[bold]run {run_id}[/] — {info['status']} ({info['stop_reason'] or 'no stop reason yet'})"
    )
    table = Table("seq", "+ms", "step", "event", "details")
    start = datetime.fromisoformat(events[0]["at"]) if events else None
    budget = None
    for e in events:
        offset = (datetime.fromisoformat(e["at"]) - start).total_seconds() * 1000 if start else 0
        details = dict(e["details"] or {})
        budget = details.pop("budget", budget)
        text = ", ".join(f"{k}={v}" for k, v in details.items())
        table.add_row(str(e["seq"]), f"{offset:.0f}", str(e["step"]), e["event"], text[:100])
    console.print(table)
    if budget:
        console.print("budget at stop: " + ", ".join(f"{k}={v}" for k, v in budget.items()))


def _decision(run_id: str, proposal_hash: str, by: str, approved: bool, as_json: bool) -> None:
    def go() -> dict[str, Any]:
        client = make_client()
        if approved:
            version = client.confirm(run_id, proposal_hash=proposal_hash, by=by)
        else:
            version = client.decline(run_id, proposal_hash=proposal_hash, by=by)
        return {
            "run_id": run_id,
            "decision": "approved" if approved else "declined",
            "version": version,
        }

    result = guard(as_json, go)
    print_json(result) if as_json else console.print(
        f"{result['decision']}: run {run_id} is back in the policy queue (v{result['version']})"
    )


HashOpt = Annotated[str, typer.Option("--proposal-hash", help="Hash shown by `run show`.")]


@run_app.command("confirm")
def run_confirm(run_id: str, proposal_hash: HashOpt, by: ByOpt, as_json: JsonOpt = False) -> None:
    """Approve exactly the pending proposal; it is re-checked by every layer, then executed."""
    _decision(run_id, proposal_hash, by, True, as_json)


@run_app.command("decline")
def run_decline(run_id: str, proposal_hash: HashOpt, by: ByOpt, as_json: JsonOpt = False) -> None:
    """Refuse the pending proposal; the planner sees a decline observation."""
    _decision(run_id, proposal_hash, by, False, as_json)


@run_app.command("grant")
def run_grant(
    run_id: str,
    capability: Annotated[str, typer.Option(help="e.g. artifact:write")],
    by: ByOpt,
    scope: Annotated[str, typer.Option("--scope", help="Resource scope.")] = "*",
    expires_at_step: Annotated[int | None, typer.Option(min=0)] = None,
    max_uses: Annotated[int | None, typer.Option(min=1)] = None,
    token: Annotated[
        str | None,
        typer.Option(help="Operator token, if WARRANT_OPERATOR_TOKEN is configured."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Grant a capability to a run (an operator action, recorded in the trace)."""
    grant_id = guard(
        as_json,
        lambda: make_client().add_grant(
            run_id,
            capability=capability,
            resource_scope=scope,
            expires_at_step=expires_at_step,
            max_uses=max_uses,
            granted_by=by,
            operator_token=token,
        ),
    )
    print_json({"grant_id": grant_id}) if as_json else console.print(f"grant {grant_id} added")


@run_app.command("pre-approve")
def run_pre_approve(
    run_id: str,
    tool: Annotated[str, typer.Option(help="The tool's name.")],
    tool_version: Annotated[str, typer.Option(help="The tool's version.")],
    arguments: Annotated[str, typer.Option(help="The exact arguments, a JSON object.")],
    by: ByOpt,
    token: Annotated[
        str | None,
        typer.Option(help="Operator token, if WARRANT_OPERATOR_TOKEN is configured."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve one exact proposal ahead of time: the run may use it once, unattended."""
    parsed = guard(as_json, lambda: _json_object(arguments))
    pre_id = guard(
        as_json,
        lambda: make_client().pre_approve(
            run_id,
            tool=tool,
            tool_version=tool_version,
            arguments=parsed,
            approved_by=by,
            operator_token=token,
        ),
    )
    if as_json:
        print_json({"pre_approval_id": pre_id})
    else:
        console.print(f"pre-approval {pre_id} added")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(f"--arguments is not JSON: {exc}", code="ARGUMENTS_NOT_JSON") from None
    if not isinstance(value, dict):
        raise InvalidRequest("--arguments must be a JSON object", code="ARGUMENTS_NOT_OBJECT")
    return value


@run_app.command("cancel")
def run_cancel(
    run_id: str,
    by: ByOpt,
    reason: Annotated[str, typer.Option(help="Why (its length is traced).")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Cancel a run: no new work starts; a running tool is interrupted; the run ends
    `cancelled` once its effects are known."""
    info = guard(as_json, lambda: make_client().cancel(run_id, by=by, reason=reason).to_dict())
    print_json(info) if as_json else console.print(f"run {run_id}: {info['status']}")


@run_app.command("view")
def run_view_cmd(run_id: str, as_json: JsonOpt = False) -> None:
    """The working-memory view the planner gets for the run's next step (rebuilt)."""
    view = guard(as_json, lambda: make_client().working_memory(run_id))
    if as_json:
        print_json(view)
        return
    console.print(f"[bold]goal[/]: {view['goal']['content']}")
    for item in view["items"]:
        console.print(f"[bold]{item['item_id']}[/] [{item['source']}] {item['content'][:160]}")
    console.print(f"tools: {', '.join(t['name'] for t in view['tools'])}")
    console.print(f"budgets: {view['budgets']}")
    console.print(f"preferences: {view['preferences']}")
