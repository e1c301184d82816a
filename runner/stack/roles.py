"""The worker roles: the queues each consumes and the plain ``celery`` command lines that run
them (``warrant worker``, ``warrant beat``, ``warrant up``, the compose file, the benchmark)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from warrant.runner.errors import InvalidRequest
from warrant.runner.limits import check_storage, limit_table, limits_url
from warrant.runner.settings import WarrantSettings, load_settings, resolved_urls
from warrant.tools._contract import Isolation
from warrant.tools._plugins import registry_for

__all__ = [
    "ROLES",
    "SOLO_ROLES",
    "THREADED_ROLES",
    "TOOL_ROLES",
    "beat_command",
    "celery_worker_command",
    "default_node",
    "role_concurrency",
    "role_of_node",
    "role_pool",
    "role_queues",
    "roles_needed",
    "worker_command",
]

ROLES = ("planner", "policy", "tool", "tool-process", "reconciler")
#: Roles whose tasks need no pool process of their own: no time limit, nothing to terminate.
#: With one process they run on Celery's solo pool: the task runs in the consuming process,
#: no fork, no pipe between the consumer and a pool child (measured: about a third less
#: worker CPU per stage hop).
SOLO_ROLES = ("policy",)
#: Roles whose tasks mostly wait (a model call takes seconds, a tool call often does): Celery's
#: threads pool, so one process holds many calls in flight (``WARRANT_PLANNER_CONCURRENCY`` /
#: ``WARRANT_TOOL_CONCURRENCY`` threads by default). A planner step has no time limit to
#: enforce and nothing to terminate (its model call is bounded by its HTTP timeout and the
#: run's deadline); a tool attempt's lease, deadline and cancellation are the process's
#: attempt watch's (``warrant.broker.tool._attempt_watch``). Tools declared
#: ``isolation="process"`` run on the ``tool-process`` role instead (prefork: time limits and
#: revoke-terminate kill the process).
THREADED_ROLES = ("planner", "tool")
#: The tool roles, and the isolation of the tools each serves.
TOOL_ROLES = {"tool": Isolation.THREAD, "tool-process": Isolation.PROCESS}


def role_queues(role: str, *, tools: Sequence[str] | None = None) -> list[str]:
    """The queues a worker of ``role`` consumes: for a tool role, those of the tools of its
    isolation (all of them, or the ones named in ``tools``)."""
    if role in TOOL_ROLES:
        registry = registry_for(ask_mcp_servers=False)  # names only: no MCP server
        unknown = sorted(set(tools or ()) - set(registry.names()))
        if unknown:
            raise InvalidRequest(f"unknown tool(s): {', '.join(unknown)}", code="UNKNOWN_TOOL")
        isolation = TOOL_ROLES[role]
        served = [n for n in registry.names() if _isolation(registry, n) is isolation]
        names = list(tools) if tools else served
        misplaced = sorted(set(names) - set(served))
        if misplaced:
            other = next(r for r, i in TOOL_ROLES.items() if i is not isolation)
            raise InvalidRequest(
                f"tool(s) {', '.join(misplaced)} run on the {other} role, not on {role} "
                "(their contract's isolation)",
                code="TOOL_ROLE_MISMATCH",
            )
        return [f"tool.{n}" for n in names]
    if role in ("planner", "policy", "reconciler"):
        return [role]
    raise InvalidRequest(f"unknown role {role!r} (one of {', '.join(ROLES)})", code="UNKNOWN_ROLE")


def _isolation(registry: Any, name: str) -> Isolation:
    """A tool's isolation: ``process`` if any of its versions needs a process."""
    versions = registry.by_name(name)
    process = any(t.isolation is Isolation.PROCESS for t in versions)
    return Isolation.PROCESS if process else Isolation.THREAD


def roles_needed(roles: Sequence[str] = ROLES) -> list[str]:
    """``roles`` without a tool role that would serve no tool in this deployment's registry
    (``warrant up`` starts ``tool-process`` only when some tool needs it)."""
    registry = registry_for(ask_mcp_servers=False)
    present = {_isolation(registry, n) for n in registry.names()}
    return [r for r in roles if r not in TOOL_ROLES or TOOL_ROLES[r] in present]


def role_pool(role: str, concurrency: int) -> str:
    """The Celery pool a worker of ``role`` runs: ``threads`` for the planner and the tool
    role (:data:`THREADED_ROLES`), ``solo`` for a one-process policy worker
    (:data:`SOLO_ROLES`), else ``prefork`` (``tool-process``, the reconciler)."""
    if role in THREADED_ROLES:
        return "threads"
    return "solo" if role in SOLO_ROLES and concurrency == 1 else "prefork"


def role_concurrency(
    role: str, concurrency: int | None, settings: WarrantSettings | None = None
) -> int:
    """``-c`` for a worker of ``role``: ``concurrency`` if given; else, for a threaded role,
    ``WARRANT_PLANNER_CONCURRENCY`` or ``WARRANT_TOOL_CONCURRENCY`` (calls one process holds
    at once), otherwise 1."""
    if concurrency is not None:
        return concurrency
    if role == "planner":
        return (settings or load_settings()).planner_concurrency
    if role == "tool":
        return (settings or load_settings()).tool_concurrency
    return 1


def celery_worker_command(
    app: str,
    queues: Sequence[str],
    *,
    node: str,
    concurrency: int = 1,
    loglevel: str = "warning",
    events: bool = True,
    pool: str = "prefork",
) -> list[str]:
    """A plain ``celery worker`` command line, by default on the prefork pool (time limits and
    revoke-terminate need it), without mingle and gossip (a worker needs neither, and they
    cost every start)."""
    return [
        *_celery(app),
        "worker",
        "-Q",
        ",".join(queues),
        "-P",
        pool,
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


def _celery(app: str) -> list[str]:
    """``celery -A app`` with this interpreter (the venv's Celery, whatever the PATH says)."""
    return [sys.executable, "-m", "celery", "-A", app]


def default_node(role: str) -> str:
    """A node name that is unique per worker process on its host: ``<role>-<pid>@%h``
    (``warrant worker`` replaces itself with Celery, so the pid is the worker's own). Several
    workers of one role on one host would otherwise share ``<role>@<host>``."""
    return f"{role}-{os.getpid()}@%h"


def role_of_node(node: str) -> str:
    """The role part of a node name: ``tool`` for ``tool-1234@host`` and for ``tool@host``."""
    name = node.partition("@")[0]
    base, sep, suffix = name.rpartition("-")
    return base if sep and suffix.isdigit() else name


def worker_command(
    role: str,
    *,
    tools: Sequence[str] | None = None,
    queues: Sequence[str] | None = None,
    concurrency: int | None = None,
    loglevel: str = "warning",
    name: str | None = None,
    events: bool = True,
    settings: WarrantSettings | None = None,
) -> list[str]:
    """The plain ``celery worker`` command line for a role; its node is ``name`` (Celery's
    ``%h`` is the host name) or :func:`default_node`, its pool :func:`role_pool`'s.

    ``queues`` narrows what the worker consumes to some of the role's own queues (a tool
    worker for ``tool.issue_refund`` only, say); a queue the role does not serve is refused.
    ``settings``: the caller's (``warrant worker``: the command line's), else this process's."""
    own = role_queues(role, tools=tools)
    settings = settings or load_settings()
    _check_limits(settings)
    if queues:
        foreign = sorted(set(queues) - set(own))
        if foreign:
            raise InvalidRequest(
                f"role {role} does not consume {', '.join(foreign)} (it serves {', '.join(own)})",
                code="UNKNOWN_QUEUE",
            )
        own = [q for q in own if q in set(queues)]
    concurrency = role_concurrency(role, concurrency, settings)
    return celery_worker_command(
        "warrant.broker.app",
        own,
        node=name or default_node(role),
        concurrency=concurrency,
        loglevel=loglevel,
        events=events,
        pool=role_pool(role, concurrency),
    )


def _check_limits(settings: WarrantSettings) -> None:
    """Bad shared limits stop a worker before it starts (``INVALID_LIMIT``)."""
    table = limit_table(settings, registry_for(settings, ask_mcp_servers=False))
    try:
        broker_url: str | None = resolved_urls(settings)[0]
    except Exception:  # SERVICES_NOT_CONFIGURED: the worker says so itself
        broker_url = None
    if broker_url is not None:
        check_storage(table, limits_url(settings, broker_url))


def beat_command(settings: WarrantSettings, *, loglevel: str = "warning") -> list[str]:
    """The plain ``celery beat`` command line (schedule state under the data folder)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return [
        *_celery("warrant.broker.app"),
        "beat",
        "-l",
        loglevel,
        "--schedule",
        str(settings.data_dir / "beat-schedule"),
    ]
