"""The suite's own Redis and PostgreSQL, on free ports in a temporary folder.

Never the machine's shared servers: each is started here, restarted here (the faults) and
stopped here. PostgreSQL refuses to run as root, so it runs as ``postgres`` then.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PG_BIN", "TempPostgres", "TempRedis", "free_port"]

PG_BIN = Path(os.environ.get("WARRANT_CHAOS_PG_BIN", "/usr/lib/postgresql/15/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")


@dataclass
class TempRedis:
    """``redis-server`` without persistence: a restart loses every queued message."""

    folder: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    persistent: bool = False
    """Keep an append-only file (``everysec``), as a production broker does: a restart then
    keeps the queues and the unacknowledged messages."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.persistent else "no",
                "--appendfsync",
                "everysec",
                "--dir",
                str(self.folder),
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        _wait_port(self.port, 10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def stall(self, seconds: float) -> None:
        """The server stops answering for ``seconds`` (``SIGSTOP``), its connections open: a
        silent peer, not a closed one."""
        if self.proc is None:
            return
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self, *, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


@dataclass
class TempPostgres:
    """A PostgreSQL cluster of its own (``initdb`` + ``pg_ctl``), trust authentication."""

    folder: Path
    port: int = field(default_factory=free_port)
    user: str | None = None
    """The OS user that runs the server (``postgres`` when this process is root)."""

    def __post_init__(self) -> None:
        if self.user is None and os.geteuid() == 0:
            self.user = "postgres"

    @property
    def data(self) -> Path:
        return self.folder / "pgdata"

    def url(self, database: str = "warrant") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        cmd = list(args)
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stderr.decode()[-2000:]}")
        return done

    def init(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            os.chmod(self.folder.parent, 0o755)  # the server's user must reach its folder
            shutil.chown(self.folder, user=self.user)
        self._run(
            str(PG_BIN / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.folder}'\nmax_connections = 300\n"
                "fsync = off\nfull_page_writes = off\nshared_buffers = 64MB\n"
            )

    def start(self) -> None:
        self._run(
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "postgres.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, *, mode: str = "fast") -> None:
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False
        )

    def restart(self, *, mode: str = "fast", down_s: float = 0.0) -> None:
        """``fast`` (clean shutdown, sessions aborted) or ``immediate`` (a crash: recovery
        on start)."""
        self.stop(mode=mode)
        time.sleep(down_s)
        self.start()

    def create_database(self, name: str = "warrant") -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
