"""The commands that run the stack or a piece of it: ``worker``, ``beat``, ``up``, ``down`` and
``demo`` (``reconcile``: :mod:`~warrant.runner.cli.reconcile`).

``up --detach`` and ``down``: the stack in the background, for a terminal that is needed for
other commands (the quick start). ``up --detach`` starts ``warrant up`` as its own session (so
Ctrl-C in the terminal does not reach it), its output in ``<data_dir>/up.log``, and returns
once every worker role answers (or with the log's last lines if it fails). ``down`` sends it
SIGTERM — the same clean stop as Ctrl-C in the foreground — and waits for it to end.

``demo``: the stack of ``up`` with the demo plug-in and its seed scenarios. The demo is a
distribution of its own (``examples/demo_plugin``, package ``warrant_demo``), loaded only for
that command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from warrant.runner.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    console,
    err,
    guard,
    print_json,
    settings_of,
)
from warrant.runner.errors import InvalidRequest, PluginError, ServiceUnavailable
from warrant.runner.settings import WarrantSettings, load_settings
from warrant.runner.stack.local import Stack
from warrant.runner.stack.roles import beat_command, worker_command
from warrant.tools._plugins import DEMO_PLUGIN, split_refs

__all__ = ["beat", "demo", "down", "up", "worker"]


def beat(
    ctx: typer.Context,
    loglevel: Annotated[str, typer.Option()] = "info",
    as_json: JsonOpt = False,
) -> None:
    """Run the scheduler of reconciler sweeps (a plain `celery beat` underneath)."""
    command = beat_command(settings_of(ctx), loglevel=loglevel)
    if as_json:
        print_json({"command": command})
    os.execv(command[0], command)


def worker(
    ctx: typer.Context,
    role: Annotated[str, typer.Option(help="planner | policy | tool | tool-process | reconciler")],
    tools: Annotated[
        str | None, typer.Option(help="Comma-separated tools (roles tool, tool-process).")
    ] = None,
    queues: Annotated[
        str | None,
        typer.Option(help="Comma-separated queues: only these of the role's own (tool.<name>)."),
    ] = None,
    hostname: Annotated[
        str | None,
        typer.Option(
            "--hostname",
            "-n",
            help="Celery node name (%h is the host name); default <role>-<pid>@%h, unique per "
            "process.",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Pool processes (the planner: threads, default WARRANT_PLANNER_CONCURRENCY); "
            "default 1.",
        ),
    ] = None,
    loglevel: Annotated[str, typer.Option()] = "info",
    as_json: JsonOpt = False,
) -> None:
    """Run one worker role in the foreground (a plain `celery worker` underneath)."""
    command = guard(
        as_json,
        lambda: worker_command(
            role,
            tools=tools.split(",") if tools else None,
            queues=queues.split(",") if queues else None,
            name=hostname,
            concurrency=concurrency,
            loglevel=loglevel,
            settings=settings_of(ctx),
        ),
    )
    if as_json:
        print_json({"command": command})
    os.execv(command[0], command)


def _stack(
    settings: WarrantSettings,
    as_json: bool,
    concurrency: int = 1,
    *,
    serve: int | None = None,
    serve_host: str = "",
) -> Any:
    stack = Stack(settings, concurrency=concurrency)
    try:
        with console.status("starting services …") if not as_json else nullcontext():
            guard(as_json, stack.start_services)
            if stack.embedded is not None and stack.embedded.reaped:
                err.print(
                    "[yellow]stopped stray embedded server(s) left by an earlier run:[/] "
                    + ", ".join(stack.embedded.reaped)
                )
            guard(as_json, stack.migrate)
            guard(as_json, stack.start_workers)  # INVALID_LIMIT, UNKNOWN_TOOL: coded
            if serve is not None:
                stack.start_server(serve_host, serve)
            guard(as_json, lambda: stack.wait_ready(stack.roles))
            if serve is not None:
                guard(as_json, stack.wait_serving)
    except BaseException:
        stack.stop()  # a failed start must not leave servers or workers behind
        raise
    return stack


def _raise_on_sigterm() -> None:
    """SIGTERM ends ``up``/``demo`` like Ctrl-C does: through ``finally``, so the workers and the
    embedded servers are stopped."""

    def _interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)


def _report_server(name: str, stack: Stack, as_json: bool) -> None:
    """An embedded server died and was started again (same socket, same data)."""
    url = stack.broker_url if name == "redis" else stack.database_url
    if as_json:
        event = {"event": "server.restarted", "server": name, "url": url.split("@")[-1]}
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()
    else:
        err.print(f"embedded {name} died; started again on the same address", highlight=False)


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


ServeOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=65535,
        metavar="PORT",
        help="Also run `warrant serve` (HTTP API and inbox) on PORT, supervised with the "
        "workers and stopped with them.",
    ),
]


def up(
    ctx: typer.Context,
    concurrency: Annotated[int, typer.Option(min=1, help="Processes per role.")] = 1,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach", "-d", help="Run in the background; return once ready (`warrant down`)."
        ),
    ] = False,
    serve: ServeOpt = None,
    serve_host: Annotated[str, typer.Option(help="Address `--serve` listens on.")] = "127.0.0.1",
    as_json: JsonOpt = False,
) -> None:
    """Start services (embedded if none configured), migrate, run every worker role.

    A role that dies is reported (exit code or signal, last log lines) and restarted with
    back-off; Ctrl-C or SIGTERM stops the workers and the embedded servers. With --detach it
    runs in the background (output in <data dir>/up.log) until `warrant down`."""
    if detach:
        data_dir = settings_of(ctx).data_dir
        extra = ["--serve", str(serve), "--serve-host", serve_host] if serve is not None else []
        with console.status("starting services and workers …") if not as_json else nullcontext():
            found = guard(as_json, lambda: _detach(data_dir, concurrency, extra))
        served = f"; API and inbox on {found['server_url']}" if found.get("server_url") else ""
        print_json(found) if as_json else console.print(
            f"[green]up[/] in the background (pid {found['pid']}): workers "
            f"{', '.join(found['workers'])}{served}; log {found['log']}. `warrant down` stops it."
        )
        return
    _raise_on_sigterm()
    stack = _stack(settings_of(ctx), as_json, concurrency, serve=serve, serve_host=serve_host)
    info = {
        "broker_url": stack.broker_url.split("@")[-1],
        "database": "ready",
        "workers": list(stack.workers.procs) if stack.workers else [],
        "embedded": stack.embedded is not None,
        "server_url": stack.server_url,
    }
    served = f"; API and inbox on {stack.server_url}" if stack.server_url else ""
    print_json(info) if as_json else console.print(
        f"[green]up[/]: workers {', '.join(info['workers'])} "
        f"({'embedded' if info['embedded'] else 'external'} services){served}. Ctrl-C stops."
    )
    sys.stdout.flush()
    write_ready(info)
    try:
        stack.supervise(
            until=lambda: False,
            report=lambda e: _report_exit(e, as_json),
            report_server=lambda name: _report_server(name, stack, as_json),
        )
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop
        stack.stop()
        if not as_json:
            console.print("stopped")


def down(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Stop the stack that `warrant up --detach` started (SIGTERM; waits for a clean stop)."""
    data_dir = settings_of(ctx).data_dir
    with console.status("stopping …") if not as_json else nullcontext():
        out = guard(as_json, lambda: _stop(data_dir))
    print_json(out) if as_json else console.print(f"stopped (pid {out['stopped']})")


def demo(as_json: JsonOpt = False) -> None:
    """Start the stack with the demo plug-in, run the seed scenarios, print a table, stop."""
    demo_plugin = guard(as_json, _demo_distribution)
    refs = split_refs(os.environ.get("WARRANT_TOOLS", ""))
    if DEMO_PLUGIN not in refs:  # the demo's tools are a plug-in, off unless named
        os.environ["WARRANT_TOOLS"] = ",".join([*refs, DEMO_PLUGIN])
    # The seed scenarios refund and notify unattended: relaxed explicitly, and said so.
    os.environ.setdefault("WARRANT_RELAX_CONFIRMATION", demo_plugin.DEMO_RELAXED)
    if not as_json:
        relaxed = os.environ["WARRANT_RELAX_CONFIRMATION"]
        console.print(
            f"[yellow]confirmation relaxed for: {relaxed}[/] (WARRANT_RELAX_CONFIRMATION)"
        )

    _raise_on_sigterm()
    # the environment changed above: the settings are read again, with the demo's tools
    stack = _stack(load_settings(), as_json)
    try:
        ok = demo_plugin.run.run_demo(as_json=as_json, console=console)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def _demo_distribution() -> Any:
    """The demo distribution's package, ``warrant_demo`` (its ``run`` loaded), or
    ``DEMO_NOT_INSTALLED``."""
    try:
        import warrant_demo.run  # lazy: optional dependency (the demo distribution)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "warrant_demo":
            raise
        raise PluginError(
            "the demo is a distribution of its own, warrant-demo, and it is not installed: "
            "pip install -e examples/demo_plugin (make install and make demo do)",
            code="DEMO_NOT_INSTALLED",
        ) from exc
    return warrant_demo


# -- up --detach and down: the stack in the background --------------------------------------------

DEFAULT_UP_TIMEOUT_S = 180.0
"""How long ``up --detach`` waits for the services and every worker role."""
DEFAULT_DOWN_TIMEOUT_S = 60.0
"""How long ``down`` waits for the stack to stop (a running tool call may take its limit)."""
READY_FILE_ENV = "WARRANT_UP_READY_FILE"
"""Where the detached ``up`` writes what it started, once ready (set by ``up --detach``)."""


def _paths(data_dir: Path) -> tuple[Path, Path, Path]:
    return data_dir / "up.pid", data_dir / "up.log", data_dir / "up.ready.json"


def write_ready(info: dict[str, Any]) -> None:
    """Called by ``up`` once ready: tell a waiting ``up --detach`` (no-op when not detached)."""
    path = os.environ.get(READY_FILE_ENV)
    if path:
        Path(path).write_text(json.dumps(info))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _running_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _detach(data_dir: Path, concurrency: int, extra: list[str]) -> dict[str, Any]:
    """Start ``warrant up`` in the background; return what it started once it is ready."""
    data_dir.mkdir(parents=True, exist_ok=True)
    pid_file, log_file, ready_file = _paths(data_dir)
    running = _running_pid(pid_file)
    if running is not None:
        raise ServiceUnavailable(
            f"warrant up is already running in the background (pid {running}); "
            "`warrant down` stops it",
            code="STACK_ALREADY_RUNNING",
        )
    ready_file.unlink(missing_ok=True)
    command = [sys.executable, "-m", "warrant.runner.cli", "up"]
    command += ["--concurrency", str(concurrency), *extra]
    env = {**os.environ, READY_FILE_ENV: str(ready_file)}
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    pid_file.write_text(str(proc.pid))
    end = time.monotonic() + DEFAULT_UP_TIMEOUT_S
    while not ready_file.exists():
        if proc.poll() is not None or time.monotonic() > end:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(DEFAULT_DOWN_TIMEOUT_S)
            pid_file.unlink(missing_ok=True)
            raise ServiceUnavailable(
                f"warrant up did not come up (exit {proc.returncode}); last lines of "
                f"{log_file}:\n{_tail(log_file)}",
                code="STACK_START_FAILED",
            )
        time.sleep(0.1)
    info: dict[str, Any] = json.loads(ready_file.read_text())
    return {**info, "pid": proc.pid, "log": str(log_file)}


def _stop(data_dir: Path) -> dict[str, Any]:
    """SIGTERM the background ``up`` and wait for it to end."""
    pid_file, _, ready_file = _paths(data_dir)
    pid = _running_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        raise InvalidRequest("no warrant up runs in the background here", code="STACK_NOT_RUNNING")
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + DEFAULT_DOWN_TIMEOUT_S
    while _alive(pid) and not _reaped(pid):
        if time.monotonic() > end:
            raise ServiceUnavailable(
                f"warrant up (pid {pid}) did not stop within {DEFAULT_DOWN_TIMEOUT_S:.0f} s",
                code="STACK_STOP_TIMEOUT",
            )
        time.sleep(0.1)
    pid_file.unlink(missing_ok=True)
    ready_file.unlink(missing_ok=True)
    return {"stopped": pid}


def _reaped(pid: int) -> bool:
    """A child of this process that has exited (a zombie until reaped) counts as stopped."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
