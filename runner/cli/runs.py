"""``warrant run ...``: start, inspect and steer runs."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Column, Table

from warrant.ledger.run_listing import newest_runs
from warrant.runner.cli.common import (
    ByOpt,
    JsonOpt,
    client_and_id,
    console,
    fail,
    guard,
    make_client,
    print_json,
    settings_of,
)
from warrant.runner.cli.run_shown import RevealByOpt, RevealOpt, revealed, show_run, trace_facts
from warrant.runner.codes import RunStatus
from warrant.runner.confirmation_rules import approvals_pending, waiting_for
from warrant.runner.errors import InvalidChoice, InvalidRequest, SpecError
from warrant.runner.settings import WarrantSettings, resolved_urls

__all__ = ["RunIdArg", "id_column", "parse_duration", "parse_instant", "run_app", "show_run"]

run_app = typer.Typer(help="Start, inspect and steer runs.", no_args_is_help=True)


def id_column(header: str) -> Column:
    """A table column for ids: never wrapped nor cut (``run show`` and the other commands
    take them whole, or a prefix of at least six characters)."""
    return Column(header, no_wrap=True, min_width=36, overflow="ignore")


RunIdArg = Annotated[str, typer.Argument(help="The run's id, or a unique prefix (6+ chars).")]
TokenOpt = Annotated[
    str | None, typer.Option(help="Operator token, if WARRANT_OPERATOR_TOKEN is configured.")
]


@run_app.command("show")
def run_show(
    run_id: RunIdArg, reveal: RevealOpt = False, by: RevealByOpt = None, as_json: JsonOpt = False
) -> None:
    """Why the run stopped or what it waits for (the stop reason, the last refusal), then its
    status, counters, version and answer. --reveal: the pending proposal's sensitive values."""
    client, whole = client_and_id(as_json, run_id)

    def go() -> dict[str, Any]:
        data: dict[str, Any] = client.get_run(whole).to_dict()
        if reveal:
            data["revealed"] = revealed(client, whole, by=by)
        return {**data, **trace_facts(data, client.trace(whole))}

    info = guard(as_json, go)
    print_json(info) if as_json else show_run(info)


#: The values ``run list --status`` accepts.
STATUSES = [s.value for s in RunStatus]


@run_app.command("list")
def run_list(
    ctx: typer.Context,
    status: Annotated[
        str | None, typer.Option(help=f"Only runs with this status: {', '.join(STATUSES)}.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    as_json: JsonOpt = False,
) -> None:
    """The most recent runs (ids whole)."""
    if status is not None and status not in STATUSES:
        fail(
            InvalidChoice(
                f"--status {status!r} is no run status; valid: {', '.join(STATUSES)}",
                valid=STATUSES,
                code="STATUS_INVALID",
            ),
            as_json,
        )
    settings = settings_of(ctx)
    runs = guard(as_json, lambda: _list_runs(settings, limit=limit, status=status))
    if as_json:
        print_json(runs)
        return
    table = Table(
        id_column("run_id"),
        "status",
        Column("stop_reason", overflow="fold"),
        "step",
        "tools",
        "created",
    )
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


def _list_runs(
    settings: WarrantSettings, *, limit: int, status: str | None
) -> list[dict[str, Any]]:
    """Over ``WARRANT_SERVER_URL``: the server's listing; else one psycopg query
    (:mod:`warrant.ledger.run_listing`: no SQLAlchemy to import, the CLI's start-up)."""
    if settings.server_url:
        client = make_client(settings=settings)
        return [r.to_dict() for r in client.list_runs(limit=limit, status=status)]

    return newest_runs(resolved_urls(settings)[1], limit=limit, status=status, settings=settings)


@run_app.command("trace")
def run_trace(run_id: RunIdArg, as_json: JsonOpt = False) -> None:
    """The run's timeline: ordered events, stop reason and budget snapshot."""
    client, run_id = client_and_id(as_json, run_id)
    info, events = guard(as_json, lambda: (client.get_run(run_id).to_dict(), client.trace(run_id)))
    if as_json:  # the HTTP API's shape (GET /v1/runs/{id}/trace)
        print_json({"run_id": run_id, "events": events})
        return
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
        said = details.pop("message", None) if e["event"] == "tool.completed" else None
        text = cut_at_word(", ".join(f"{k}={v}" for k, v in details.items()), 100)
        if said:  # a tool's refusal or failure in its own words (bounded when recorded)
            text += f"\nmessage: {said}"
        table.add_row(str(e["seq"]), f"{offset:.0f}", str(e["step"]), e["event"], escape(text))
    console.print(table)
    if budget:
        console.print("budget at stop: " + ", ".join(f"{k}={v}" for k, v in budget.items()))


def cut_at_word(text: str, width: int) -> str:
    """``text`` up to ``width`` characters, cut after a whole word (a word longer than half the
    width is cut inside), marked with an ellipsis when anything was left out."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    space = max(head.rfind(" "), head.rfind(","))
    return (head[:space] if space >= width // 2 else head).rstrip(" ,") + "…"


def _decision(run_id: str, proposal_hash: str, by: str, approved: bool, as_json: bool) -> None:
    client, run_id = client_and_id(as_json, run_id)

    def go() -> dict[str, Any]:
        if approved:
            version = client.confirm(run_id, proposal_hash=proposal_hash, by=by)
        else:
            version = client.decline(run_id, proposal_hash=proposal_hash, by=by)
        out: dict[str, Any] = {
            "run_id": run_id,
            "decision": "approved" if approved else "declined",
            "version": version,
        }
        if approved:
            request = client.get_run(run_id).confirmation_request
            more = approvals_pending(request, proposal_hash)
            out["waiting_for_more"] = more is not None
            out.update(more or {})
        return out

    result = guard(as_json, go)
    if as_json:
        print_json(result)
    elif result.get("waiting_for_more"):
        names = ", ".join(result["approved_by"])
        console.print(
            f"approval recorded: {len(result['approved_by'])} of "
            f"{result['approvals_required']} approvals ({names}); run {run_id} waits for more"
        )
    else:
        console.print(
            f"{result['decision']}: run {run_id} is back in the policy queue (v{result['version']})"
        )


HashOpt = Annotated[str, typer.Option("--proposal-hash", help="Hash shown by `run show`.")]


@run_app.command("confirm")
def run_confirm(
    run_id: RunIdArg, proposal_hash: HashOpt, by: ByOpt, as_json: JsonOpt = False
) -> None:
    """Approve exactly the pending proposal; it is re-checked by every layer, then executed."""
    _decision(run_id, proposal_hash, by, True, as_json)


@run_app.command("decline")
def run_decline(
    run_id: RunIdArg, proposal_hash: HashOpt, by: ByOpt, as_json: JsonOpt = False
) -> None:
    """Refuse the pending proposal; the planner sees a decline observation."""
    _decision(run_id, proposal_hash, by, False, as_json)


@run_app.command("correct")
def run_correct(
    run_id: RunIdArg,
    proposal_hash: HashOpt,
    by: ByOpt,
    changes: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="ARGUMENT=VALUE (repeatable); a VALUE that reads as JSON is JSON (42, true, "
            '"007"), anything else a string.',
        ),
    ],
    reason: Annotated[str, typer.Option(help="Why (traced).")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Edit the pending proposal instead of approving it as it is: a new proposal (its
    arguments with your changes, its own hash) goes through the whole gate again; the original
    is declined and never runs. Your edit approves the new proposal when one approver
    suffices; otherwise it waits for its own confirmation."""
    parsed = guard(as_json, lambda: _assignments(changes))
    client, run_id = client_and_id(as_json, run_id)
    result = guard(
        as_json,
        lambda: client.correct(
            run_id, proposal_hash=proposal_hash, changes=parsed, by=by, reason=reason
        ).to_dict(),
    )
    if as_json:
        print_json(result)
        return
    then = "approved by your edit" if result["approved"] else "waits for its own confirmation"
    console.print(
        f"corrected {', '.join(result['changed'])}: proposal {result['proposal_hash'][:12]} "
        f"(step {result['step']}) is back in the policy queue and {then}"
    )


def _assignments(items: list[str]) -> dict[str, Any]:
    """``--set ARGUMENT=VALUE`` options as argument → value (JSON when it reads as JSON)."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise InvalidRequest(f"--set {item!r}: write ARGUMENT=VALUE", code="USAGE_ERROR")
        try:
            out[name.strip()] = json.loads(text)
        except ValueError:
            out[name.strip()] = text
    return out


@run_app.command("decide")
def run_decide(
    run_id: RunIdArg,
    by: ByOpt,
    approve: Annotated[
        list[str] | None, typer.Option("--approve", help="A hash to approve (repeatable).")
    ] = None,
    decline: Annotated[
        list[str] | None, typer.Option("--decline", help="A hash to decline (repeatable).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve and decline several calls of a waiting parallel step at once, each by its hash
    (`run show` lists them); the run goes on once every call of the set is decided."""
    client, run_id = client_and_id(as_json, run_id)

    def go() -> dict[str, Any]:
        version = client.decide(run_id, approve=approve or [], decline=decline or [], by=by)
        waiting = waiting_for(client.get_run(run_id).confirmation_request)
        return {"run_id": run_id, "version": version, "waiting_for": waiting}

    result = guard(as_json, go)
    if as_json:
        print_json(result)
    elif result["waiting_for"]:
        console.print(
            f"recorded; run {run_id} still waits for {len(result['waiting_for'])} call(s)"
        )
    else:
        console.print(f"decided: run {run_id} is back in the policy queue (v{result['version']})")


@run_app.command("grant")
def run_grant(
    run_id: RunIdArg,
    capability: Annotated[str, typer.Option(help="e.g. artifact:write")],
    by: ByOpt,
    scope: Annotated[str, typer.Option("--scope", help="Resource scope.")] = "*",
    expires_at_step: Annotated[int | None, typer.Option(min=0)] = None,
    max_uses: Annotated[int | None, typer.Option(min=1)] = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    expires_in: Annotated[
        str | None, typer.Option("--for", help="Valid for 90s, 15m, 1h30m, 2d (database time).")
    ] = None,
    expires_at: Annotated[str | None, typer.Option(help="Valid until (ISO 8601, UTC).")] = None,
    widen: Annotated[bool, typer.Option(help="Widen a standing grant (traced).")] = False,
    constraints: Annotated[
        str | None,
        typer.Option(help='Limits on argument values (JSON): {"max": {"amount_cents": 5000}}.'),
    ] = None,
) -> None:
    """Grant a capability to a run (an operator action, recorded in the trace). A finished
    run (completed, failed, cancelled) is refused: RUN_FINISHED; a grant wider than a standing
    one of its capability without --widen: GRANT_WIDENING_REFUSED."""
    client, run_id = client_and_id(as_json, run_id)
    limits = guard(as_json, lambda: _constraints(constraints))
    grant_id = guard(
        as_json,
        lambda: client.add_grant(
            run_id,
            capability=capability,
            resource_scope=scope,
            expires_at_step=expires_at_step,
            max_uses=max_uses,
            granted_by=by,
            operator_token=token,
            expires_in_s=parse_duration(expires_in) if expires_in is not None else None,
            expires_at=parse_instant(expires_at) if expires_at is not None else None,
            widen=widen,
            constraints=limits,
        ),
    )
    print_json({"grant_id": grant_id}) if as_json else console.print(f"grant {grant_id} added")


@run_app.command("pre-approve")
def run_pre_approve(
    run_id: RunIdArg,
    tool: Annotated[str, typer.Option(help="The tool's name.")],
    tool_version: Annotated[str, typer.Option(help="The tool's version.")],
    arguments: Annotated[str, typer.Option(help="The exact arguments, a JSON object.")],
    by: ByOpt,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve one exact proposal ahead of time: the run may use it once, unattended. A
    finished run is refused: RUN_FINISHED."""
    parsed = guard(as_json, lambda: _json_object(arguments))
    client, run_id = client_and_id(as_json, run_id)
    pre_id = guard(
        as_json,
        lambda: client.pre_approve(
            run_id,
            tool=tool,
            tool_version=tool_version,
            arguments=parsed,
            approved_by=by,
            operator_token=token,
        ),
    )
    print_json({"pre_approval_id": pre_id}) if as_json else console.print(
        f"pre-approval {pre_id} added"
    )


def _constraints(text: str | None) -> dict[str, Any] | None:
    """``--constraints``: a JSON object (else ``SPEC_INVALID``, as a spec's grant would be)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        problem = f"not JSON: {exc}"
    else:
        if isinstance(value, dict):
            return value
        problem = "not a JSON object"
    raise SpecError("invalid grant", errors=[{"field": "constraints", "message": problem}])


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
    run_id: RunIdArg,
    by: ByOpt,
    reason: Annotated[str, typer.Option(help="Why (its length is traced).")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Cancel a run: no new work starts; a running tool is interrupted; the run ends
    `cancelled` once its effects are known."""
    client, run_id = client_and_id(as_json, run_id)
    info = guard(as_json, lambda: client.cancel(run_id, by=by, reason=reason).to_dict())
    print_json(info) if as_json else console.print(f"run {run_id}: {info['status']}")


@run_app.command("view")
def run_view_cmd(run_id: RunIdArg, as_json: JsonOpt = False) -> None:
    """The working-memory view the planner gets for the run's next step (rebuilt)."""
    client, run_id = client_and_id(as_json, run_id)
    view = guard(as_json, lambda: client.working_memory(run_id))
    if as_json:
        print_json(view)
        return
    console.print(f"[bold]goal[/]: {view['goal']['content']}")
    for item in view["items"]:
        shown = escape(f"[{item['source']}] {item['content'][:160]}")
        console.print(f"[bold]{item['item_id']}[/] {shown}")
    console.print(f"tools: {', '.join(t['name'] for t in view['tools'])}")
    console.print(f"budgets: {view['budgets']}")
    console.print(f"preferences: {view['preferences']}")


# --- run grant's time options: --for 1h30m (from the database's now), --expires-at (ISO 8601) ----


_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(value: str) -> float:
    """``90s``, ``15m``, ``1h30m``, ``2d``, or plain seconds; else :class:`InvalidRequest`
    ``DURATION_INVALID``."""
    text = value.strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise InvalidRequest(
                f"not a duration like 90s, 15m, 1h30m or 2d: {value!r}", code="DURATION_INVALID"
            ) from None
        seconds = sum(float(n) * _SECONDS[u] for n, u in parts)
    if not seconds > 0:
        raise InvalidRequest(f"a duration must be positive: {value!r}", code="DURATION_INVALID")
    return seconds


def parse_instant(value: str) -> datetime:
    """An ISO 8601 datetime (UTC unless it names an offset); else :class:`InvalidRequest`
    ``INVALID_DATE``."""
    try:
        instant = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidRequest(f"not an ISO 8601 datetime: {value!r}", code="INVALID_DATE") from None
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)
