"""Supervised worker processes: started, reported when one dies (how, and its last log
lines), restarted with back-off, stopped warm then hard."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Backoff", "RoleExit", "WorkerProcesses"]


def _tail(log: Path | None, *, lines: int = 10) -> list[str]:
    if log is None:
        return []
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


@dataclass(frozen=True)
class RoleExit:
    """A supervised process that exited on its own: which role, how, and what it last logged."""

    label: str
    pid: int
    returncode: int
    log: Path | None
    last_lines: list[str]
    restart_in: float

    @property
    def how(self) -> str:
        if self.returncode < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-self.returncode).name}"
            return f"killed by signal {-self.returncode}"
        return f"exit code {self.returncode}"

    def describe(self) -> str:
        where = f"; log {self.log}" if self.log else ""
        head = (
            f"role {self.label} (pid {self.pid}) died: {self.how}{where}; "
            f"restarting in {self.restart_in:g}s"
        )
        return "\n".join([head, *(f"  | {line}" for line in self.last_lines)])


@dataclass
class Backoff:
    """Restart delays: ``first`` seconds, doubling up to ``cap``; back to ``first`` once the
    process has stayed up ``stable_after`` seconds."""

    first: float = 1.0
    cap: float = 30.0
    stable_after: float = 60.0
    _next: dict[str, float] = field(default_factory=dict)

    def delay(self, label: str, *, uptime: float) -> float:
        current = self.first if uptime >= self.stable_after else self._next.get(label, self.first)
        self._next[label] = min(self.cap, current * 2)
        return current


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


#: ``prctl(2)``, looked up once in the parent: the child of a fork must not import or
#: ``dlopen`` (another thread of the parent may have held the import or loader lock at the fork,
#: and the child would wait for it forever, its parent with it — a chaos run's supervisor hung so).
_PRCTL = _prctl()
_PR_SET_PDEATHSIG = 1


def stop_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM (a warm shutdown) when the process
    that started it dies, so a killed ``warrant up`` leaves no orphaned workers behind. Only
    calls a function resolved before the fork (see ``_PRCTL``)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class WorkerProcesses:
    """Celery worker subprocesses; stopped with SIGTERM (warm shutdown), then SIGKILL.

    :meth:`supervise` restarts a process that exited on its own (with :class:`Backoff`) and
    reports each exit as a :class:`RoleExit`.
    """

    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    backoff: Backoff = field(default_factory=Backoff)
    commands: dict[str, tuple[list[str], Path | None]] = field(default_factory=dict)
    started_at: dict[str, float] = field(default_factory=dict)
    restart_at: dict[str, float] = field(default_factory=dict)

    def spawn(self, label: str, command: list[str], *, log: Path | None = None) -> None:
        self.commands[label] = (command, log)
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.procs[label] = subprocess.Popen(
                command,
                env=self.env,
                stdout=out,
                stderr=out,
                start_new_session=True,
                preexec_fn=stop_with_parent,
            )
        finally:
            if log:
                out.close()  # type: ignore[union-attr]
        self.started_at[label] = time.monotonic()

    def alive(self) -> dict[str, bool]:
        return {k: p.poll() is None for k, p in self.procs.items()}

    def pids(self) -> dict[str, int]:
        return {k: p.pid for k, p in self.procs.items()}

    def supervise(self, *, now: float | None = None) -> list[RoleExit]:
        """Notice processes that exited (reported once each) and restart those whose back-off
        delay has passed. Call it periodically."""
        now = time.monotonic() if now is None else now
        dead = [
            k for k, p in self.procs.items() if k not in self.restart_at and p.poll() is not None
        ]
        exits = [self._on_exit(label, now) for label in dead]
        for label, due in list(self.restart_at.items()):
            if now >= due:
                del self.restart_at[label]
                command, log = self.commands[label]
                self.spawn(label, command, log=log)
        return exits

    def _on_exit(self, label: str, now: float) -> RoleExit:
        proc = self.procs[label]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # a dead main process's orphaned pool
        uptime = now - self.started_at.get(label, now)
        delay = self.backoff.delay(label, uptime=uptime)
        self.restart_at[label] = now + delay
        log = self.commands[label][1]
        return RoleExit(label, proc.pid, proc.returncode or 0, log, _tail(log), delay)

    def stop(self, *, timeout: float = 15.0) -> None:
        self.restart_at.clear()
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + timeout
        for p in self.procs.values():
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        self.procs.clear()
