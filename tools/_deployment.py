"""Do the worker roles agree on the tool set? (Pure: the ledger supplies the registrations.)"""

from __future__ import annotations

__layer__ = "pure core"

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["WorkerInfo", "disagreements", "lacking_role", "unserved"]


@dataclass(frozen=True)
class WorkerInfo:
    """One running worker's registration."""

    node: str
    roles: tuple[str, ...]
    queues: tuple[str, ...]
    fingerprint: str
    tools: frozenset[str]
    """``name@version`` of every tool in its registry."""
    process: str = ""
    """The worker process's identity (unique across hosts; node names are not)."""
    pid: int | None = None


def roles_of(queues: Sequence[str]) -> tuple[str, ...]:
    """The roles a worker plays, from the queues it consumes."""
    roles = {"tool" if q.startswith("tool.") else q for q in queues}
    return tuple(sorted(r for r in roles if r in ("planner", "policy", "tool", "reconciler")))


def lacking_role(workers: Sequence[WorkerInfo], name: str, version: str) -> str | None:
    """Why a proposal for ``name@version`` cannot run though the policy worker knows it: the
    live workers consuming ``tool.<name>`` exist and none of them has that version. ``None``
    when some worker has it, or when no worker consumes the queue yet (the message waits)."""
    queue, key = f"tool.{name}", f"{name}@{version}"
    serving = [w for w in workers if queue in w.queues]
    if not serving or any(key in w.tools for w in serving):
        return None
    nodes = ", ".join(sorted(w.node for w in serving))
    return f"role tool lacks {key}: the workers consuming {queue} ({nodes}) do not have it"


def disagreements(workers: Sequence[WorkerInfo]) -> list[str]:
    """Human-readable differences between the live workers' registries (empty: they agree)."""
    if len({w.fingerprint for w in workers}) <= 1:
        return []
    every = frozenset().union(*(w.tools for w in workers))
    found = []
    for w in sorted(workers, key=lambda w: (w.node, w.process)):
        missing = sorted(every - w.tools)
        if missing:
            found.append(f"{w.node} ({', '.join(w.roles)}) lacks {', '.join(missing)}")
    if not found:  # same names and versions, different contracts
        prints = ", ".join(f"{w.node}={w.fingerprint[:12]}" for w in workers)
        found.append(f"same tools, different contracts: {prints}")
    return found


def unserved(workers: Sequence[WorkerInfo], tool_names: Sequence[str]) -> list[str]:
    """The tools of ``tool_names`` whose queue (``tool.<name>``) no live worker consumes: a
    proposal for one is accepted and then waits for a worker that is not there."""
    consumed = {q for w in workers for q in w.queues}
    return sorted(n for n in tool_names if f"tool.{n}" not in consumed)
