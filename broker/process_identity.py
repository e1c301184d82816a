"""Who this process is, in a form no other machine can share.

A host name says nothing across machines: cloned VMs, network namespaces and some container
set-ups share one, and two workers on one host may run under one Celery node name. What does
tell processes apart is the kernel they run on and the pid namespace they live in: a pid is
meaningful only to processes that share both. :func:`this_process` returns

- ``space``: a digest of the kernel's boot id (``/proc/sys/kernel/random/boot_id``, random per
  boot, so two machines or two boots never share one) and the pid namespace's inode. Two
  processes with the same ``space`` can ask the kernel about each other's pids;
- ``pid`` and ``started``: the process id and its start time in clock ticks since boot (field
  22 of ``/proc/<pid>/stat``), so a pid reused by a later process is not mistaken for it.

Without ``/proc`` (not Linux) the space is random per process: nobody else ever judges this
process's liveness by pid, which is the safe answer. Computed once per process, again after a
fork (a prefork pool child is a process of its own).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessIdentity", "process_started", "this_process"]


@dataclass(frozen=True)
class ProcessIdentity:
    space: str
    """Kernel boot and pid namespace (16 hex digits): where ``pid`` means this process."""
    pid: int
    started: int
    """Start time of the process in clock ticks since boot; 0 when unknown."""

    @property
    def label(self) -> str:
        """``<pid>.<started>.<space>``: unique across machines, boots and pid reuse."""
        return f"{self.pid}.{self.started}.{self.space}"


def process_started(pid: int) -> int | None:
    """The start time (clock ticks since boot) of process ``pid``, or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    # fields[0] is the state (field 3 of stat), so field 22 (starttime) is fields[19].
    return int(fields[19]) if len(fields) > 19 else None


def _space() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return uuid.uuid4().hex[:16]
    return hashlib.sha256(f"{boot}/{namespace}".encode()).hexdigest()[:16]


_cached: ProcessIdentity | None = None


def this_process() -> ProcessIdentity:
    """This process's identity (recomputed when the pid changed: after a fork)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached.pid != pid:
        _cached = ProcessIdentity(space=_space(), pid=pid, started=process_started(pid) or 0)
    return _cached
