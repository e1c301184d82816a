"""The suite's worker processes (every role plus beat) and a supervisor that restarts them.

Each process is the plain ``celery`` command line of :mod:`warrant.runner.stack.roles`,
started in a session of its own so a whole process group can be reaped. When a main process dies (a
SIGKILL from the suite), the supervisor starts it again and, a little later, kills what is
left of its old group (pool children orphaned by their parent's death finish or die).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from warrant.runner.stack.supervisor import stop_with_parent

__all__ = ["KILL_TARGETS", "Supervisor", "WorkerSpec"]

#: Orphaned pool children of a killed parent get this long before their group is reaped.
ORPHAN_GRACE_S = 15.0


@dataclass(frozen=True)
class WorkerSpec:
    label: str
    """``planner``, ``policy``, ``tool``, ``reconciler`` or ``beat``."""
    command: tuple[str, ...]


@dataclass
class _Proc:
    spec: WorkerSpec
    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    restarts: int = 0


#: (label, what) pairs the kill fault cycles through: a pool child or the main process.
KILL_TARGETS: tuple[tuple[str, str], ...] = (
    ("planner", "child"),
    ("policy", "child"),
    ("tool", "child"),
    ("reconciler", "child"),
    ("planner", "parent"),
    ("policy", "parent"),
    ("tool", "parent"),
    ("reconciler", "parent"),
    ("beat", "parent"),
)


class Supervisor:
    def __init__(self, specs: list[WorkerSpec], env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.procs: dict[str, _Proc] = {}
        self._specs = specs
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._orphans: list[tuple[float, psutil.Process]] = []
        self._known_children: dict[str, list[psutil.Process]] = {}
        self.restarts = 0

    def _spawn(self, spec: WorkerSpec) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{spec.label}.log", "ab")  # noqa: SIM115
        p = subprocess.Popen(
            list(spec.command),
            env=self.env,
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=stop_with_parent,  # a killed suite leaves no worker behind
        )
        log.close()
        return p

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for spec in self._specs:
            self.procs[spec.label] = _Proc(spec, self._spawn(spec))
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        tick = 0
        while not self._stop.wait(0.2):
            tick += 1
            with self._lock:
                for label, proc in list(self.procs.items()):
                    if proc.popen.poll() is not None:
                        grace = time.monotonic() + ORPHAN_GRACE_S
                        for child in self._known_children.pop(label, []):
                            self._orphans.append((grace, child))
                        self.procs[label] = _Proc(
                            proc.spec, self._spawn(proc.spec), restarts=proc.restarts + 1
                        )
                        self.restarts += 1
                    elif tick % 5 == 0:
                        self._remember_children(label, proc.popen.pid)
                now = time.monotonic()
                due = [c for t, c in self._orphans if t <= now]
                self._orphans = [(t, c) for t, c in self._orphans if t > now]
            for child in due:
                _kill(child)

    def _remember_children(self, label: str, pid: int) -> None:
        """The pool children of a live main process, kept so that, if it dies, its orphans
        (identified by pid and start time) can be reaped."""
        try:
            kids = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return
        known = {(c.pid, _created(c)) for c in self._known_children.get(label, [])}
        merged = [c for c in self._known_children.get(label, []) if c.is_running()]
        merged += [c for c in kids if (c.pid, _created(c)) not in known]
        self._known_children[label] = merged

    def children(self, label: str) -> list[int]:
        with self._lock:
            proc = self.procs.get(label)
            pid = proc.popen.pid if proc else None
        if pid is None:
            return []
        try:
            return [c.pid for c in psutil.Process(pid).children(recursive=False)]
        except psutil.Error:
            return []

    def _solo(self, label: str) -> bool:
        command = next(s.command for s in self._specs if s.label == label)
        # solo and threads: the tasks run in the main process (no pool child)
        return "-P" in command and command[command.index("-P") + 1] in ("solo", "threads")

    def kill(self, label: str, what: str, rng: random.Random) -> str | None:
        """SIGKILL ``label``'s main process or one of its pool children; None if there was
        nothing alive to kill (the caller tries again later). A solo or threads-pool worker
        (no pool child) runs its tasks in its main process: "child" kills that."""
        if what == "child" and self._solo(label):
            what = "parent"
        if what == "child":
            kids = self.children(label)
            if not kids:
                return None
            pid = rng.choice(kids)
        else:
            with self._lock:
                proc = self.procs[label]
                if proc.popen.poll() is not None or time.monotonic() - proc.started < 3.0:
                    return None  # still starting: let it come up first
                pid = proc.popen.pid
        if what == "parent":
            with self._lock:
                self._remember_children(label, pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return f"{label}:{what}:{pid}"

    def stop(self, timeout: float = 20.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            procs = list(self.procs.values())
        for p in procs:
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGTERM)
        end = time.monotonic() + timeout
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(max(0.1, end - time.monotonic()))
        with self._lock:
            leftovers = [c for _, c in self._orphans]
            for kids in self._known_children.values():
                leftovers += kids
        for p in procs:
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.popen.pid, signal.SIGKILL)  # its own live session
        for child in leftovers:
            _kill(child)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(5)


def _created(p: psutil.Process) -> float:
    try:
        return float(p.create_time())
    except psutil.Error:
        return 0.0


def _kill(p: psutil.Process) -> None:
    """SIGKILL a process this suite started (psutil checks it is still the same process)."""
    with contextlib.suppress(psutil.Error):
        p.kill()
