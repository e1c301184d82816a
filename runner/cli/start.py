"""``warrant run start`` and ``warrant run wait``: start a run, and follow one until it
settles, with a progress line and an exit code that says how it ended
(:data:`~warrant.runner.cli.common.EXIT_BY_STATUS`).

Following: one progress line per change of the run (its version), until it settles or the
wait's timeout passes. Each change comes from the client's ``wait_change``: a database-backed
client polls the ledger (a growing pause, 50 ms to 0.5 s); a remote one long-polls ``GET
/v1/runs/{id}/wait?version=``, so the server answers once per change, not per look.

The wait's deadline holds whatever does not answer. Connect, socket and statement timeouts
bound most silences, but not all: a PostgreSQL or a Redis whose process is frozen (or whose
host went silent after the kernel acknowledged the request) leaves a call waiting for a reply
that never comes. Every call of the wait goes through :meth:`Deadline.call`, which runs it in
a daemon thread and gives up on it at the deadline (``--timeout`` plus :data:`GRACE_S`):
:class:`~warrant.runner.errors.WaitTimedOut`, exit 5. The abandoned thread dies with the
process.

``warrant run fork`` starts a run too: a new live one from another's record before a step
(:mod:`warrant.ledger.forks`)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO, TypeVar, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.status import Status

from warrant.ledger.repo import ROWS_HASHED
from warrant.ledger.workers import LIVE_WITHIN_S
from warrant.runner.cli.common import (
    EXIT_BY_STATUS,
    EXIT_INTERRUPTED,
    EXIT_TIMED_OUT,
    JsonOpt,
    client_and_id,
    console,
    err,
    fail,
    guard,
    make_client,
    print_json,
    resolve,
)
from warrant.runner.cli.run_shown import show_run, trace_facts
from warrant.runner.cli.runs import run_app
from warrant.runner.client.run_info import SETTLED
from warrant.runner.errors import SpecError, WaitTimedOut, WarrantError
from warrant.runner.grants import unknown_capabilities
from warrant.runner.spec import parse_run_spec
from warrant.tools._plugins import registry_for

if TYPE_CHECKING:
    from warrant.runner.client.contract import RunnerClient
    from warrant.runner.client.run_info import RunInfo

__all__ = ["GRACE_S", "fixture_warnings", "run_start", "run_wait"]

_T = TypeVar("_T")
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

    def bound(fn: Callable[[], _T], what: str) -> _T:  # with --wait, by the deadline
        return deadline.call(fn, what=what) if wait else fn()

    deployed = guard(as_json, lambda: bound(lambda: _policy_tools(client), LEDGER))
    warnings = fixture_warnings(spec, deployed=deployed) + _capability_warnings(spec)
    for warning in warnings:
        err.print(f"[yellow]warning[/] {escape(warning)}", soft_wrap=True)

    def start() -> str:
        return client.start_run(spec, idempotency_key=idempotency_key)

    run_id = guard(as_json, lambda: bound(start, STARTING))
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


@run_app.command("fork")
def run_fork(
    run_id: Annotated[str, typer.Argument(help="The source run's id, or a unique prefix of it.")],
    at: Annotated[
        int,
        typer.Option("--at", help="The step the fork starts at: 1 to the source's last step + 1."),
    ],
    spec_patch: Annotated[
        Path | None,
        typer.Option(
            help="A JSON merge patch (RFC 7386) of the source's spec ('-' for stdin): a "
            "changed goal, grants or planner."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a new live run from a run's record before step --at: its observations (and the
    proposals, commands and outcomes of those steps) carried, its budgets and grant uses so
    far counted; nothing before --at is done again, the fork plans step --at live."""
    patch = None if spec_patch is None else _spec_patch(_read_spec(spec_patch, as_json), as_json)
    client, whole = client_and_id(as_json, run_id)
    fork_id = guard(as_json, lambda: client.fork_run(whole, at=at, spec_patch=patch))
    info = guard(as_json, lambda: client.get_run(fork_id))
    print_json(info.to_dict()) if as_json else console.print(
        f"forked [bold]{fork_id}[/] from {whole} at step {at}", soft_wrap=True
    )


def _spec_patch(text: str, as_json: bool) -> dict[str, Any]:
    try:
        patch = json.loads(text)
    except ValueError as exc:
        fail(
            SpecError(f"the spec patch is not JSON: {exc}", errors=_patch_error(str(exc))), as_json
        )
    if not isinstance(patch, dict):
        fail(
            SpecError("a spec patch is a JSON object", errors=_patch_error("not an object")),
            as_json,
        )
    return patch


def _patch_error(message: str) -> list[dict[str, str]]:
    return [{"field": "SPEC_PATCH", "message": message}]


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
    whole = guard(as_json, lambda: deadline.call(lambda: resolve(client, run_id), what=LEDGER))
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
    progress = Progress(sys.stderr if as_json else sys.stdout)  # --json: stdout is one document
    client = cast(
        "RunnerClient", BoundedClient(client, deadline, what=f"the ledger (run {run_id} goes on)")
    )
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
    print_json(data) if as_json else show_run(data)
    raise typer.Exit(EXIT_BY_STATUS.get(info.status, EXIT_TIMED_OUT))


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


def _capability_warnings(spec: Any) -> list[str]:
    """Grants of a capability no tool of this process's registry requires (a typo, usually)."""
    try:
        return unknown_capabilities(spec.grants, registry_for(ask_mcp_servers=False))
    except WarrantError as exc:
        return [f"the grants' capabilities were not checked: [{exc.code}] {exc}"]


def fixture_warnings(spec: Any, *, deployed: frozenset[str] | None = None) -> list[str]:
    """What a fixture plan calls that the gate does not know: the gate refuses each such call
    (``UNKNOWN_TOOL_OR_VERSION``), and the run usually ends with another reason, so it is said
    before the run starts. ``deployed`` is what the live policy workers registered
    (:func:`_policy_tools`); without it, this process's own registry (``WARRANT_TOOLS``, …)
    stands in, and the warning says so."""
    if getattr(spec.planner, "kind", None) != "fixture":
        return []
    calls = [
        (index, output.get("tool"), output.get("tool_version"))
        for index, output in enumerate(spec.planner.outputs)
        if isinstance(output, dict) and output.get("kind") == "tool"
    ]
    calls = [(i, name, v) for i, name, v in calls if isinstance(name, str) and isinstance(v, str)]
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


class Progress:
    """Where the progress line goes: ``stream`` rewritten in place (a rich status line) when
    it is a terminal, else one plain line per change (a log or a pipe reads every one)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self._status: Status | None = None
        self._last: str | None = None

    def show(self, line: str) -> None:
        if line == self._last:
            return
        self._last = line
        if not self.live:
            self.stream.write(line + "\n")
            self.stream.flush()
        elif self._status is None:
            self._status = Console(file=self.stream).status(escape(line), spinner="dots")
            self._status.start()
        else:
            self._status.update(escape(line))

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def progress_line(info: RunInfo, event: dict[str, Any] | None) -> str:
    """``run ID: step N · status/phase · last event (its tool or code)``."""
    line = f"run {info.run_id}: step {info.step} · {info.status}/{info.phase}"
    if event is not None:
        details = event.get("details") or {}
        subject = details.get("code") or details.get("tool") or details.get("to") or ""
        line += f" · {event['event']}" + (f" {subject}" if subject else "")
    return line


def follow(client: RunnerClient, run_id: str, *, timeout: float, progress: Progress) -> RunInfo:
    """Report each change of the run to ``progress`` until it settles (terminal or waiting
    for a person) or ``timeout`` seconds pass; the last state seen."""
    deadline = time.monotonic() + timeout
    info = client.get_run(run_id)
    seen: int | None = None
    while True:
        if info.version != seen:
            seen = info.version
            events = [e for e in client.trace(run_id) if e["event"] != ROWS_HASHED]
            progress.show(progress_line(info, events[-1] if events else None))
        left = deadline - time.monotonic()
        if info.status in SETTLED or left <= 0:
            return info
        info = client.wait_change(run_id, version=info.version, timeout=left)


#: How long after ``--timeout`` a call that has not answered is given up on.
GRACE_S = 2.0


class Deadline:
    """``timeout_s`` (plus :data:`GRACE_S`) from now."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.end = time.monotonic() + timeout_s + GRACE_S

    def call(self, fn: Callable[[], _T], *, what: str) -> _T:
        """``fn()``, or :class:`WaitTimedOut` if it has not returned by the deadline."""
        result: list[Any] = []
        failure: list[BaseException] = []

        def target() -> None:
            try:
                result.append(fn())
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)

        thread = threading.Thread(target=target, name="warrant-wait-call", daemon=True)
        thread.start()
        thread.join(max(0.0, self.end - time.monotonic()))
        if thread.is_alive():
            raise WaitTimedOut(
                f"{what} did not answer within the wait's {self.timeout_s:g} s "
                f"(+{GRACE_S:g} s grace)"
            )
        if failure:
            raise failure[0]
        return result[0]


class BoundedClient:
    """A client whose every method call is bounded by ``deadline`` (attributes that are not
    methods pass through)."""

    def __init__(self, client: Any, deadline: Deadline, *, what: str) -> None:
        self._client = client
        self._deadline = deadline
        self._what = what

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def bounded(*args: Any, **kwargs: Any) -> Any:
            return self._deadline.call(lambda: attr(*args, **kwargs), what=self._what)

        return bounded
