"""A PostgreSQL server of the test's own, on a free port, that the test may restart or kill.

Never the shared one: the servers other tests (and other people) use are not touched. Run as
the ``postgres`` system user when the tests run as root (``initdb`` refuses root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["OwnPostgres", "postgres_binaries"]


def postgres_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "pg_ctl").exists() and Path(folder, "initdb").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnPostgres:
    """``initdb`` in a folder of its own, then ``start``/``restart``/``kill``/``stop`` with
    ``pg_ctl``; :meth:`stop` also removes the folder. (Not under pytest's ``tmp_path``: that
    one is private to the user running the tests, and the server may run as another.)"""

    def __init__(self, *, bin_dir: Path) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="warrant-own-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.bin_dir = bin_dir
        self.port = _free_port()
        self.as_user = "postgres" if os.geteuid() == 0 else None

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_user:
            command = ["runuser", "-u", self.as_user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)}: {done.stderr or done.stdout}")

    def init(self) -> OwnPostgres:
        if self.as_user:
            shutil.chown(self.root, user=self.as_user)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-N")
        return self

    def _options(self) -> str:
        return (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} "
            "-c fsync=off -c full_page_writes=off"
        )

    def _ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-o", self._options(), "-l", str(self.log), *args)

    def start(self) -> None:
        self._ctl("-w", "start")

    def restart(self) -> None:
        """A fast restart: every session is told FATAL and closed."""
        self._ctl("-m", "fast", "-w", "restart")

    def kill(self) -> None:
        """An immediate stop (no checkpoint, sessions dropped), as a crash would."""
        self._ctl("-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        try:
            self._ctl("-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"
