"""``warrant run start`` and ``warrant run wait``: start a run, and follow one until it
settles, with a progress line and an exit code that says how it ended
(:data:`~warrant.runner.cli.common.EXIT_BY_STATUS`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from warrant.ledger.workers import LIVE_WITHIN_S
from warrant.runner.cli import ids
from warrant.runner.cli.common import (
    EXIT_INTERRUPTED,
    JsonOpt,
    console,
    err,
    exit_code_for,
    fail,
    guard,
    make_client,
    print_json,
)
from warrant.runner.cli.deadline import GRACE_S, Deadline, bounded
from warrant.runner.cli.follow import Progress, follow
from warrant.runner.cli.policy_steps import trace_facts
from warrant.runner.cli.runs import run_app, show_run
from warrant.runner.errors import SpecError, WarrantError
from warrant.runner.spec import parse_run_spec
from warrant.tools._plugins import registry_for

if TYPE_CHECKING:
    from warrant.runner.client.contract import RunnerClient

__all__ = ["fixture_warnings", "run_start", "run_wait"]

TimeoutOpt = Annotated[
    float,
    typer.Option(
        min=0,
        help="Seconds to wait; then exit 5 (the run goes on), also when the ledger or the "
        "broker stops answering (a few seconds' grace).",
    ),
]
#: What a bounded call waits on, as its WAIT_TIMED_OUT message says.
LEDGER = "the ledger"
STARTING = (
    "the ledger or the broker, starting the run (it may or may not be recorded: the same "
    "--idempotency-key starts it at most once)"
)


@run_app.command("start")
def run_start(
    spec_file: Annotated[Path, typer.Argument(help="Run spec JSON file ('-' for stdin).")],
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Follow the run until it settles. Exit 0 completed, 1 failed or cancelled, "
            "4 waiting for a person, 5 timed out.",
        ),
    ] = False,
    timeout: TimeoutOpt = 120.0,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Start at most once: the same key again returns the same run."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate a run spec, record the run and enqueue its first planner step.

    The run's id is printed at once (first line; on stderr with --json). A fixture plan that
    names a tool this deployment's registry lacks is started, with a warning."""
    deadline = Deadline(timeout)  # with --wait, the whole command ends by then
    text = _read_spec(spec_file, as_json)
    spec = guard(as_json, lambda: parse_run_spec(text))
    client = guard(as_json, make_client)
    if wait:
        deployed = guard(as_json, lambda: deadline.call(lambda: _policy_tools(client), what=LEDGER))
    else:
        deployed = _policy_tools(client)
    warnings = fixture_warnings(spec, deployed=deployed)
    for warning in warnings:
        err.print(f"[yellow]warning[/] {escape(warning)}", soft_wrap=True)

    def start() -> str:
        run_id: str = client.start_run(spec, idempotency_key=idempotency_key)
        return run_id

    if wait:
        run_id = guard(as_json, lambda: deadline.call(start, what=STARTING))
    else:
        run_id = guard(as_json, start)
    if not wait:  # a repeated key's run may have moved on: read its status
        status = guard(as_json, lambda: client.get_run(run_id).status) if idempotency_key else None
        result = {"run_id": run_id, "status": status or "running", "warnings": warnings}
        print_json(result) if as_json else console.print(
            f"started [bold]{run_id}[/]", soft_wrap=True
        )
        return
    if as_json:
        err.print(f"run {run_id}", soft_wrap=True, highlight=False)
    else:
        console.print(f"started [bold]{run_id}[/]", soft_wrap=True)
    sys.stdout.flush()
    sys.stderr.flush()
    _attach(client, run_id, deadline=deadline, as_json=as_json, extra={"warnings": warnings})


@run_app.command("wait")
def run_wait(
    run_id: Annotated[str, typer.Argument(help="The run's id, or a unique prefix of it.")],
    timeout: TimeoutOpt = 120.0,
    as_json: JsonOpt = False,
) -> None:
    """Re-attach to a run: follow it until it settles, as `run start --wait` does (same
    progress line, same exit codes: 0 completed, 1 failed or cancelled, 4 waiting for a
    person, 5 timed out)."""
    deadline = Deadline(timeout)
    client = guard(as_json, make_client)
    whole = guard(as_json, lambda: deadline.call(lambda: ids.run_id(client, run_id), what=LEDGER))
    _attach(client, whole, deadline=deadline, as_json=as_json, extra={})


def _attach(
    client: RunnerClient,
    run_id: str,
    *,
    deadline: Deadline,
    as_json: bool,
    extra: dict[str, Any],
) -> None:
    """Follow the run until the deadline, print where it ended (with why) and exit with its
    exit code; every call is bounded by the deadline (a silent ledger: ``WAIT_TIMED_OUT``)."""
    progress = Progress.for_output(as_json=as_json)
    client = bounded(client, deadline, what=f"the ledger (run {run_id} goes on)")
    timeout = max(0.0, deadline.end - GRACE_S - time.monotonic())
    try:
        info = guard(as_json, lambda: follow(client, run_id, timeout=timeout, progress=progress))
        events = guard(as_json, lambda: client.trace(run_id))
    except KeyboardInterrupt:
        progress.close()
        err.print(
            f"stopped waiting; run {run_id} goes on. Re-attach: warrant run wait {run_id}",
            soft_wrap=True,
            highlight=False,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        progress.close()
    data = {**info.to_dict(), **trace_facts(info.to_dict(), events), **extra}
    if as_json:
        print_json(data)
    else:
        show_run(data)
    raise typer.Exit(exit_code_for(info.status))


def _read_spec(spec_file: Path, as_json: bool) -> str:
    try:
        return sys.stdin.read() if str(spec_file) == "-" else spec_file.read_text()
    except OSError as exc:
        fail(
            SpecError(
                f"cannot read {spec_file}: {exc.strerror}",
                errors=[{"field": "SPEC_FILE", "message": str(exc.strerror)}],
            ),
            as_json,
        )


def _policy_tools(client: RunnerClient) -> frozenset[str] | None:
    """``name@version`` of every tool the live policy workers have (their registrations: the
    gate runs there), or None when that cannot be read (a remote client, no policy worker
    registered, the ledger unreachable)."""

    try:
        return client.policy_tools(seen_within_s=LIVE_WITHIN_S)
    except Exception:  # the start itself reports an unreachable ledger, with its code
        return None


def _fixture_calls(spec: Any) -> list[tuple[int, str, str]]:
    calls = []
    for index, output in enumerate(spec.planner.outputs):
        if not isinstance(output, dict) or output.get("kind") != "tool":
            continue
        name, version = output.get("tool"), output.get("tool_version")
        if isinstance(name, str) and isinstance(version, str):
            calls.append((index, name, version))
    return calls


def fixture_warnings(spec: Any, *, deployed: frozenset[str] | None = None) -> list[str]:
    """What a fixture plan calls that the gate does not know: the gate refuses each such call
    (``UNKNOWN_TOOL_OR_VERSION``), and the run usually ends with another reason, so it is said
    before the run starts. ``deployed`` is what the live policy workers registered
    (:func:`_policy_tools`); without it, this process's own registry (``WARRANT_TOOLS``, …)
    stands in, and the warning says so."""
    if getattr(spec.planner, "kind", None) != "fixture":
        return []
    calls = _fixture_calls(spec)
    if not calls:
        return []
    if deployed is not None:
        known, lacks = deployed, "which the policy workers' registries lack"
    else:
        try:
            known = frozenset(registry_for(ask_mcp_servers=False).keys())  # no MCP server
        except WarrantError as exc:
            return [f"the plan's tools were not checked: [{exc.code}] {exc}"]
        lacks = "which this process's tool registry lacks (no policy worker is registered)"
    return [
        f"fixture output {index} calls {name}@{version}, {lacks}: "
        "the gate will refuse it (UNKNOWN_TOOL_OR_VERSION)"
        for index, name, version in calls
        if f"{name}@{version}" not in known
    ]
