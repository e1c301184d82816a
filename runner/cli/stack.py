"""The commands that run the stack or a piece of it: ``worker``, ``beat``, ``up`` and ``down``
(``reconcile``: :mod:`~warrant.runner.cli.reconcile`; ``demo``: :mod:`~warrant.runner.cli.demo`)."""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import nullcontext
from typing import Annotated, Any

import typer

from warrant.runner.cli import background
from warrant.runner.cli.common import (
    JsonOpt,
    console,
    err,
    guard,
    print_json,
    settings_of,
)
from warrant.runner.settings import WarrantSettings
from warrant.runner.stack.local import Stack
from warrant.runner.stack.roles import beat_command, worker_command

__all__ = ["beat", "down", "up", "worker"]


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
            _report_reaped(stack, as_json)
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


def up(
    ctx: typer.Context,
    concurrency: Annotated[int, typer.Option(min=1, help="Processes per role.")] = 1,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach", "-d", help="Run in the background; return once ready (`warrant down`)."
        ),
    ] = False,
    serve: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            metavar="PORT",
            help="Also run `warrant serve` (HTTP API and inbox) on PORT, supervised with the "
            "workers and stopped with them.",
        ),
    ] = None,
    serve_host: Annotated[str, typer.Option(help="Address `--serve` listens on.")] = "127.0.0.1",
    as_json: JsonOpt = False,
) -> None:
    """Start services (embedded if none configured), migrate, run every worker role.

    A role that dies is reported (exit code or signal, last log lines) and restarted with
    back-off; Ctrl-C or SIGTERM stops the workers and the embedded servers. With --detach it
    runs in the background (output in <data dir>/up.log) until `warrant down`."""
    if detach:
        _up_detached(settings_of(ctx), concurrency, as_json, serve=serve, serve_host=serve_host)
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
    background.write_ready(info)
    try:
        stack.supervise(until=lambda: False, report=lambda e: _report_exit(e, as_json))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop
        stack.stop()
        if not as_json:
            console.print("stopped")


def _up_detached(
    settings: WarrantSettings,
    concurrency: int,
    as_json: bool,
    *,
    serve: int | None,
    serve_host: str,
) -> None:
    data_dir = settings.data_dir
    extra = ["--serve", str(serve), "--serve-host", serve_host] if serve is not None else []
    with console.status("starting services and workers …") if not as_json else nullcontext():
        info = guard(
            as_json, lambda: background.detach(data_dir, concurrency=concurrency, extra=extra)
        )
    if as_json:
        print_json(info)
        return
    served = f"; API and inbox on {info['server_url']}" if info.get("server_url") else ""
    console.print(
        f"[green]up[/] in the background (pid {info['pid']}): workers "
        f"{', '.join(info['workers'])}{served}; log {info['log']}. `warrant down` stops it."
    )


def down(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Stop the stack that `warrant up --detach` started (SIGTERM; waits for a clean stop)."""
    data_dir = settings_of(ctx).data_dir
    with console.status("stopping …") if not as_json else nullcontext():
        out = guard(as_json, lambda: background.stop(data_dir))
    print_json(out) if as_json else console.print(f"stopped (pid {out['stopped']})")
