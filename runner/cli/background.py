"""``warrant up --detach`` and ``warrant down``: the stack in the background, for a terminal
that is needed for other commands (the quick start).

``up --detach`` starts ``warrant up`` as its own session (so Ctrl-C in the terminal does not
reach it), its output in ``<data_dir>/up.log``, and returns once every worker role answers
(or with the log's last lines if it fails). ``down`` sends it SIGTERM — the same clean stop as
Ctrl-C in the foreground — and waits for it to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from warrant.runner.errors import InvalidRequest, ServiceUnavailable

__all__ = [
    "DEFAULT_DOWN_TIMEOUT_S",
    "DEFAULT_UP_TIMEOUT_S",
    "READY_FILE_ENV",
    "detach",
    "stop",
    "write_ready",
]

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


def detach(
    data_dir: Path,
    *,
    concurrency: int,
    extra: list[str] | None = None,
    timeout: float = DEFAULT_UP_TIMEOUT_S,
) -> dict[str, Any]:
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
    command += ["--concurrency", str(concurrency), *(extra or [])]
    env = {**os.environ, READY_FILE_ENV: str(ready_file)}
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    pid_file.write_text(str(proc.pid))
    end = time.monotonic() + timeout
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


def stop(data_dir: Path, *, timeout: float = DEFAULT_DOWN_TIMEOUT_S) -> dict[str, Any]:
    """SIGTERM the background ``up`` and wait for it to end."""
    pid_file, _, ready_file = _paths(data_dir)
    pid = _running_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        raise InvalidRequest("no warrant up runs in the background here", code="STACK_NOT_RUNNING")
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while _alive(pid) and not _reaped(pid):
        if time.monotonic() > end:
            raise ServiceUnavailable(
                f"warrant up (pid {pid}) did not stop within {timeout:.0f} s",
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
