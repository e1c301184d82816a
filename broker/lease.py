"""Who holds a started command, and until when: one live attempt per command.

A tool attempt is ``started`` by one worker process, recorded on the command as
``<node>/<pid>``. Its lease lasts until the attempt's hard time limit (the pool kills the
process then) plus a margin for clocks. Until then a second delivery of the same message
must leave the command alone, unless the holder is known dead: a process of the *same*
node (so of this machine) that no longer exists. Every doubt keeps the attempt live, so
the worst a wrong guess costs is waiting for the lease to expire (the reconciler's stale
sweep), never a second attempt over a running one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from warrant.broker.transitions import HARD_LIMIT_GRACE_S

__all__ = ["Holder", "holder_lost", "holder_of", "lease_end", "process_gone", "worker_label"]


@dataclass(frozen=True)
class Holder:
    node: str
    """The Celery node name (``name@host``) whose pool ran the attempt."""
    pid: int | None
    """The pool process, if recorded."""


def worker_label(node: str, pid: int) -> str:
    """What a tool attempt records as its worker: ``<node>/<pid>``."""
    return f"{node}/{pid}"


def holder_of(worker: str | None) -> Holder | None:
    if not worker:
        return None
    node, _, pid = worker.rpartition("/")
    if not node or not pid.isdigit():
        return Holder(worker, None)
    return Holder(node, int(pid))


def lease_end(started_at: float, timeout_s: float, *, margin_s: float) -> float:
    """When an attempt started at ``started_at`` can no longer be running: its hard time
    limit (``timeout_s`` + the grace the pool allows) plus ``margin_s``."""
    return started_at + timeout_s + HARD_LIMIT_GRACE_S + margin_s


def process_gone(pid: int) -> bool:
    """True only if no live process has this pid on this machine (a zombie is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def holder_lost(holder: Holder | None, *, this_node: str | None) -> bool:
    """Is the attempt's process known to be no longer in it? Only decidable for a holder of
    this very node (same machine, same pool); anyone else is presumed alive until the lease
    ends. A prefork process runs one task at a time: if the holder is this process, its
    attempt is over (a stage retry after a connection error brought the message back)."""
    if holder is None or holder.pid is None or this_node is None or holder.node != this_node:
        return False
    return holder.pid == os.getpid() or process_gone(holder.pid)
