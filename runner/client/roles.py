"""The worker roles: the queues each consumes and the plain ``celery`` command lines that run
them (``warrant worker``, ``warrant beat``, ``warrant up``, the compose file, the benchmark)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from warrant.runner.errors import InvalidRequest
from warrant.runner.settings import WarrantSettings

__all__ = ["ROLES", "beat_command", "celery_worker_command", "role_queues", "worker_command"]

ROLES = ("planner", "policy", "tool", "reconciler")


def role_queues(role: str, *, tools: Sequence[str] | None = None) -> list[str]:
    """The queues a worker of ``role`` consumes."""
    from warrant.tools.plugins import registry_for

    if role == "tool":
        registry = registry_for()
        names = list(tools) if tools else registry.names()
        unknown = sorted(set(names) - set(registry.names()))
        if unknown:
            raise InvalidRequest(f"unknown tool(s): {', '.join(unknown)}", code="UNKNOWN_TOOL")
        return [f"tool.{n}" for n in names]
    if role in ("planner", "policy", "reconciler"):
        return [role]
    raise InvalidRequest(f"unknown role {role!r} (one of {', '.join(ROLES)})", code="UNKNOWN_ROLE")


def celery_worker_command(
    app: str,
    queues: Sequence[str],
    *,
    node: str,
    concurrency: int = 1,
    loglevel: str = "warning",
    events: bool = True,
) -> list[str]:
    """A plain ``celery worker`` command line on the prefork pool (revoke needs it), without
    mingle and gossip (a worker needs neither, and they cost every start)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        app,
        "worker",
        "-Q",
        ",".join(queues),
        "-P",
        "prefork",
        "-c",
        str(concurrency),
        "-n",
        node,
        "-l",
        loglevel,
        *(["-E"] if events else []),
        "--without-mingle",
        "--without-gossip",
    ]


def worker_command(
    role: str,
    *,
    tools: Sequence[str] | None = None,
    concurrency: int = 1,
    loglevel: str = "warning",
    name: str | None = None,
) -> list[str]:
    """The plain ``celery worker`` command line for a role; its node is ``<role>@<host>``."""
    return celery_worker_command(
        "warrant.broker.app",
        role_queues(role, tools=tools),
        node=name or f"{role}@%h",
        concurrency=concurrency,
        loglevel=loglevel,
    )


def beat_command(settings: WarrantSettings, *, loglevel: str = "warning") -> list[str]:
    """The plain ``celery beat`` command line (schedule state under the data folder)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "warrant.broker.app",
        "beat",
        "-l",
        loglevel,
        "--schedule",
        str(settings.data_dir / "beat-schedule"),
    ]
