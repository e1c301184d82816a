"""The ``warrant`` command line. Every command takes ``--json``; errors carry stable codes."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from warrant.runner.errors import (
    ConfirmationRefused,
    InvalidRequest,
    NotFound,
    PluginError,
    ServiceUnavailable,
    SpecError,
    StateConflict,
    Unauthorized,
    WarrantError,
)

app = typer.Typer(
    help="warrant: the model proposes, the program decides.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
run_app = typer.Typer(help="Start, inspect and steer runs.", no_args_is_help=True)
tools_app = typer.Typer(help="Tool contracts.", no_args_is_help=True)
db_app = typer.Typer(help="The ledger database.", no_args_is_help=True)
app.add_typer(run_app, name="run")
app.add_typer(tools_app, name="tools")
app.add_typer(db_app, name="db")
handoff_app = typer.Typer(help="Runs handed to a person.", no_args_is_help=True)
memory_app = typer.Typer(help="Long-term memory (preferences).", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
app.add_typer(handoff_app, name="handoff")

console = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]

#: Exit codes: 0 ok, 1 the run/command did not succeed, 2 bad input, 3 services unavailable.
EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNAVAILABLE = 1, 2, 3

#: The error classes that exit ``EXIT_BAD_INPUT``: mapped by class, never by code.
BAD_INPUT: tuple[type[WarrantError], ...] = (
    InvalidRequest,
    SpecError,
    NotFound,
    StateConflict,
    ConfirmationRefused,
    Unauthorized,
    PluginError,
)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _fail(exc: WarrantError, as_json: bool) -> None:
    if isinstance(exc, BAD_INPUT):
        code = EXIT_BAD_INPUT
    elif isinstance(exc, ServiceUnavailable):
        code = EXIT_UNAVAILABLE
    else:
        code = EXIT_FAILED
    if as_json:
        _print_json({"error": exc.to_dict()})
    else:
        # one line (no wrapping at the terminal's width); the message is text, not markup
        err.print(f"[bold red]error[/] \\[{exc.code}] {escape(str(exc))}", soft_wrap=True)
        for item in getattr(exc, "errors", []):
            err.print(f"  - {item['field']}: {item['message']}")
    raise typer.Exit(code)


def _guard(as_json: bool, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except WarrantError as exc:
        _fail(exc, as_json)
    except Exception as exc:  # a service that cannot be reached, typically
        from sqlalchemy.exc import OperationalError

        if isinstance(exc, OperationalError | ConnectionError | OSError):
            _fail(ServiceUnavailable(str(exc).splitlines()[0]), as_json)
        raise


def _client() -> Any:
    from warrant.runner.api import Client

    return Client.from_env()


# --- run ------------------------------------------------------------------------------------


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
        console.print(
            f"  warrant run confirm {info['run_id']} --proposal-hash "
            f"{request['proposal_hash']} --by NAME"
        )


@run_app.command("start")
def run_start(
    spec_file: Annotated[Path, typer.Argument(help="Run spec JSON file ('-' for stdin).")],
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the run settles.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait with --wait.")] = 120.0,
    as_json: JsonOpt = False,
) -> None:
    """Validate a run spec, record the run and enqueue its first planner step."""
    from warrant.runner.spec import parse_run_spec

    try:
        text = sys.stdin.read() if str(spec_file) == "-" else spec_file.read_text()
    except OSError as exc:
        _fail(
            SpecError(
                f"cannot read {spec_file}: {exc.strerror}",
                errors=[{"field": "SPEC_FILE", "message": str(exc.strerror)}],
            ),
            as_json,
        )

    def go() -> dict[str, Any]:
        spec = parse_run_spec(text)
        client = _client()
        run_id = client.start_run(spec)
        if not wait:
            return {"run_id": run_id, "status": "running"}
        with console.status(f"run {run_id} …", spinner="dots") if not as_json else _null():
            return client.wait(run_id, timeout=timeout).to_dict()

    result = _guard(as_json, go)
    if as_json:
        _print_json(result)
    elif "goal" in result:
        _show_run(result)
    else:
        console.print(f"started [bold]{result['run_id']}[/]")
    if wait and result.get("status") not in ("completed",):
        raise typer.Exit(EXIT_FAILED)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


@run_app.command("show")
def run_show(run_id: str, as_json: JsonOpt = False) -> None:
    """Status, stop reason, counters, version and answer of one run."""
    info = _guard(as_json, lambda: _client().get_run(run_id).to_dict())
    _print_json(info) if as_json else _show_run(info)


@run_app.command("list")
def run_list(
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    as_json: JsonOpt = False,
) -> None:
    """The most recent runs."""
    runs = _guard(
        as_json, lambda: [r.to_dict() for r in _client().list_runs(limit=limit, status=status)]
    )
    if as_json:
        _print_json(runs)
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
        client = _client()
        return client.get_run(run_id).to_dict(), client.trace(run_id)

    info, events = _guard(as_json, go)
    if as_json:
        _print_json(events)
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
        client = _client()
        if approved:
            version = client.confirm(run_id, proposal_hash=proposal_hash, by=by)
        else:
            version = client.decline(run_id, proposal_hash=proposal_hash, by=by)
        return {
            "run_id": run_id,
            "decision": "approved" if approved else "declined",
            "version": version,
        }

    result = _guard(as_json, go)
    _print_json(result) if as_json else console.print(
        f"{result['decision']}: run {run_id} is back in the policy queue (v{result['version']})"
    )


HashOpt = Annotated[str, typer.Option("--proposal-hash", help="Hash shown by `run show`.")]
ByOpt = Annotated[str, typer.Option("--by", help="Who decides (recorded with the decision).")]


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
    grant_id = _guard(
        as_json,
        lambda: _client().add_grant(
            run_id,
            capability=capability,
            resource_scope=scope,
            expires_at_step=expires_at_step,
            max_uses=max_uses,
            granted_by=by,
            operator_token=token,
        ),
    )
    _print_json({"grant_id": grant_id}) if as_json else console.print(f"grant {grant_id} added")


@run_app.command("cancel")
def run_cancel(
    run_id: str,
    by: ByOpt,
    reason: Annotated[str, typer.Option(help="Why (its length is traced).")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Cancel a run: no new work starts; a running tool is interrupted; the run ends
    `cancelled` once its effects are known."""
    info = _guard(as_json, lambda: _client().cancel(run_id, by=by, reason=reason).to_dict())
    _print_json(info) if as_json else console.print(f"run {run_id}: {info['status']}")


# --- tools, db ------------------------------------------------------------------------------


@tools_app.command("list")
def tools_list(as_json: JsonOpt = False) -> None:
    """Every tool contract, with JSON Schemas in the shape MCP uses."""
    from warrant.tools.plugins import registry_for

    registry = _guard(as_json, registry_for)
    tools = [{**t.describe(), "source": registry.source_of(t)} for t in registry]
    if as_json:
        _print_json({"tools": tools, "fingerprint": registry.fingerprint})
        return
    table = Table(
        "name", "version", "side effect", "confirmation", "capabilities", "timeout", "source"
    )
    for t in tools:
        table.add_row(
            t["name"],
            t["version"],
            t["sideEffect"],
            t["confirmation"],
            ", ".join(t["requiredCapabilities"]),
            f"{t['timeoutSeconds']}s",
            t["source"],
        )
    console.print(table)
    console.print(f"registry fingerprint {registry.fingerprint[:12]}")


@tools_app.command("check")
def tools_check(as_json: JsonOpt = False) -> None:
    """Do the running workers (and this process) agree on the tool set? Exit 1 if not."""
    from warrant.broker.registration import LIVE_WITHIN_S
    from warrant.ledger.db import engine_for
    from warrant.ledger.workers import live_workers
    from warrant.runner.settings import resolved_urls
    from warrant.tools.deployment import WorkerInfo, disagreements
    from warrant.tools.plugins import registry_for

    registry = _guard(as_json, registry_for)
    url = _guard(as_json, lambda: resolved_urls()[1])
    workers = _guard(as_json, lambda: live_workers(engine_for(url), seen_within_s=LIVE_WITHIN_S))
    here = WorkerInfo(
        node="(this process)",
        roles=("cli",),
        queues=(),
        fingerprint=registry.fingerprint,
        tools=frozenset(registry.keys()),
    )
    problems = disagreements([*workers, here])
    report = {
        "ok": not problems,
        "fingerprint": registry.fingerprint,
        "workers": [
            {
                "node": w.node,
                "roles": list(w.roles),
                "fingerprint": w.fingerprint,
                "tools": sorted(w.tools),
            }
            for w in workers
        ],
        "disagreements": problems,
    }
    if as_json:
        _print_json(report)
    else:
        table = Table("node", "roles", "fingerprint", "tools")
        for w in report["workers"]:
            table.add_row(
                w["node"], ", ".join(w["roles"]), w["fingerprint"][:12], str(len(w["tools"]))
            )
        console.print(table)
        for p in problems:
            console.print(f"[red]disagree[/]: {p}")
        if not problems:
            console.print(
                f"[green]agree[/]: {len(workers)} worker(s), fingerprint "
                f"{registry.fingerprint[:12]}"
            )
    if problems:
        raise typer.Exit(EXIT_FAILED)


@db_app.command("upgrade")
def db_upgrade(as_json: JsonOpt = False) -> None:
    """Apply the ledger's Alembic migrations."""
    from warrant.broker.deps import setup_plugins
    from warrant.ledger.migrate import upgrade
    from warrant.runner.settings import resolved_urls

    url = _guard(as_json, lambda: resolved_urls()[1])
    revision = _guard(as_json, lambda: upgrade(url))
    plugins = _guard(as_json, lambda: setup_plugins(url))
    _print_json({"revision": revision, "plugins_set_up": plugins}) if as_json else console.print(
        f"ledger at revision [bold]{revision}[/]"
        + (f"; set up: {', '.join(plugins)}" if plugins else "")
    )


# --- memory ----------------------------------------------------------------------------------


@memory_app.command("list")
def memory_list(
    subject: Annotated[str, typer.Option(help="Whose memory.")],
    all_: Annotated[bool, typer.Option("--all", help="Include revoked and expired.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Records of a subject (active only unless --all)."""
    records = _guard(as_json, lambda: _client().memory().records(subject, include_inactive=all_))
    if as_json:
        _print_json(records)
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
    out = _guard(as_json, lambda: _client().memory().revoke(record_id, by=by))
    _print_json(out) if as_json else console.print(f"revoked {record_id} ({out['key']})")


@run_app.command("view")
def run_view_cmd(run_id: str, as_json: JsonOpt = False) -> None:
    """The working-memory view the planner gets for the run's next step (rebuilt)."""
    view = _guard(as_json, lambda: _client().working_memory(run_id))
    if as_json:
        _print_json(view)
        return
    console.print(f"[bold]goal[/]: {view['goal']['content']}")
    for item in view["items"]:
        console.print(f"[bold]{item['item_id']}[/] [{item['source']}] {item['content'][:160]}")
    console.print(f"tools: {', '.join(t['name'] for t in view['tools'])}")
    console.print(f"budgets: {view['budgets']}")
    console.print(f"preferences: {view['preferences']}")


# --- handoff ---------------------------------------------------------------------------------


@handoff_app.command("list")
def handoff_list(
    all_: Annotated[bool, typer.Option("--all", help="Include resolved handoffs.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Open handoffs (newest first)."""
    items = _guard(as_json, lambda: _client().handoffs(open_only=not all_))
    if as_json:
        _print_json([{k: v for k, v in h.items() if k != "bundle"} for h in items])
        return
    table = Table("handoff_id", "run_id", "reason", "created", "resolution")
    for h in items:
        table.add_row(
            h["handoff_id"], h["run_id"], h["reason"], h["created_at"][:19], h["resolution"] or ""
        )
    console.print(table)


@handoff_app.command("show")
def handoff_show(handoff_id: str, as_json: JsonOpt = False) -> None:
    """The whole bundle: state, goal, evidence, pending proposal, unknown effects, actions."""
    h = _guard(as_json, lambda: _client().handoff(handoff_id))
    if as_json:
        _print_json(h)
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
    console.print("recommended safe actions:")
    for a in b["recommended_safe_actions"]:
        console.print(f"  - {a}")
    console.print("forbidden automatic actions:")
    for a in b["forbidden_automatic_actions"]:
        console.print(f"  - {a}")
    if h["resolution"]:
        console.print(f"resolved: {h['resolution']} by {h['resolved_by']}")


@handoff_app.command("resolve")
def handoff_resolve(
    handoff_id: str,
    outcome: Annotated[str, typer.Option(help="completed | failed | cancelled")],
    by: ByOpt,
    reason: Annotated[str, typer.Option(help="Why (recorded).")],
    as_json: JsonOpt = False,
) -> None:
    """End a handed-off run: a command through the state machine, with identity and reason."""
    info = _guard(
        as_json,
        lambda: (
            _client().resolve_handoff(handoff_id, outcome=outcome, by=by, reason=reason).to_dict()
        ),
    )
    _print_json(info) if as_json else console.print(
        f"run {info['run_id']}: {info['status']} ({info['stop_reason']})"
    )


@app.command("reconcile")
def reconcile_once(as_json: JsonOpt = False) -> None:
    """Run one reconciler sweep now, in this process (beat schedules them normally)."""
    from warrant.broker.context import worker_context
    from warrant.broker.stage_reconciler import sweep

    report = _guard(as_json, lambda: sweep(worker_context()).to_dict())
    _print_json(report) if as_json else console.print(report)


@app.command("beat")
def beat(
    loglevel: Annotated[str, typer.Option()] = "info",
    as_json: JsonOpt = False,
) -> None:
    """Run the scheduler of reconciler sweeps (a plain `celery beat` underneath)."""
    from warrant.runner.settings import WarrantSettings
    from warrant.runner.stack import beat_command

    command = beat_command(WarrantSettings(), loglevel=loglevel)
    if as_json:
        _print_json({"command": command})
    os.execv(command[0], command)


# --- worker, up, demo -----------------------------------------------------------------------


@app.command("worker")
def worker(
    role: Annotated[str, typer.Option(help="planner | policy | tool | reconciler")],
    tools: Annotated[str | None, typer.Option(help="Comma-separated tools (role tool).")] = None,
    concurrency: Annotated[int, typer.Option(min=1)] = 1,
    loglevel: Annotated[str, typer.Option()] = "info",
    as_json: JsonOpt = False,
) -> None:
    """Run one worker role in the foreground (a plain `celery worker` underneath)."""
    from warrant.runner.stack import worker_command

    command = _guard(
        as_json,
        lambda: worker_command(
            role,
            tools=tools.split(",") if tools else None,
            concurrency=concurrency,
            loglevel=loglevel,
        ),
    )
    if as_json:
        _print_json({"command": command})
    os.execv(command[0], command)


def _stack(as_json: bool, concurrency: int = 1) -> Any:
    from warrant.runner.settings import WarrantSettings
    from warrant.runner.stack import Stack

    stack = Stack(WarrantSettings(), concurrency=concurrency)
    try:
        with console.status("starting services …") if not as_json else _null():
            _guard(as_json, stack.start_services)
            _report_reaped(stack, as_json)
            _guard(as_json, stack.migrate)
            stack.start_workers()
            _guard(as_json, lambda: stack.wait_ready(("planner", "policy", "tool", "reconciler")))
    except BaseException:
        stack.stop()  # a failed start must not leave servers or workers behind
        raise
    return stack


def _report_reaped(stack: Any, as_json: bool) -> None:
    reaped = stack.embedded.reaped if stack.embedded is not None else []
    if reaped:
        err.print(
            f"[yellow]stopped stray embedded server(s) left by an earlier run:[/] "
            f"{', '.join(reaped)}"
        )


def _raise_on_sigterm() -> None:
    """SIGTERM ends ``up``/``demo`` like Ctrl-C does: through ``finally``, so the workers and the
    embedded servers are stopped."""

    def _interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)


def _report_exit(exit_: Any, as_json: bool) -> None:
    if as_json:  # one line per event, flushed: `up --json` is read as a stream
        event = {
            "event": "role.died",
            "role": exit_.label,
            "pid": exit_.pid,
            "returncode": exit_.returncode,
            "how": exit_.how,
            "log": str(exit_.log) if exit_.log else None,
            "last_lines": exit_.last_lines,
            "restart_in_s": exit_.restart_in,
        }
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()
    else:
        err.print(exit_.describe(), style="red", markup=False, highlight=False)


@app.command("up")
def up(
    concurrency: Annotated[int, typer.Option(min=1, help="Processes per role.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Start services (embedded if none configured), migrate, run every worker role.

    A role that dies is reported (exit code or signal, last log lines) and restarted with
    back-off; Ctrl-C or SIGTERM stops the workers and the embedded servers."""
    _raise_on_sigterm()
    stack = _stack(as_json, concurrency)
    info = {
        "broker_url": stack.broker_url.split("@")[-1],
        "database": "ready",
        "workers": list(stack.workers.procs) if stack.workers else [],
        "embedded": stack.embedded is not None,
    }
    _print_json(info) if as_json else console.print(
        f"[green]up[/]: workers {', '.join(info['workers'])} "
        f"({'embedded' if info['embedded'] else 'external'} services). Ctrl-C stops."
    )
    sys.stdout.flush()
    try:
        stack.supervise(until=lambda: False, report=lambda e: _report_exit(e, as_json))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop
        stack.stop()
        if not as_json:
            console.print("stopped")


@app.command("demo")
def demo(as_json: JsonOpt = False) -> None:
    """Start the stack with the demo plug-in, run the seed scenarios, print a table, stop."""
    from warrant.runner.demo import run_demo
    from warrant.tools.plugins import DEMO_PLUGIN, split_refs

    refs = split_refs(os.environ.get("WARRANT_TOOLS", ""))
    if DEMO_PLUGIN not in refs:  # the demo's tools are a plug-in, off unless named
        os.environ["WARRANT_TOOLS"] = ",".join([*refs, DEMO_PLUGIN])

    _raise_on_sigterm()
    stack = _stack(as_json)
    try:
        ok = run_demo(as_json=as_json, console=console)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
