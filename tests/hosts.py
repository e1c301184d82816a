"""Several hosts on one machine: network namespaces the test makes itself (root only).

A :class:`Lab` makes an ``infra`` namespace holding a bridge, a Redis and a PostgreSQL of its
own, and one namespace per host, each joined to the bridge by a veth pair (``10.231.T.0/24``,
``T`` drawn per lab). A process started on a host (:meth:`Lab.spawn`) gets that host's
network, its own pid namespace (its pids mean nothing to the other hosts) and its own host
name, which two hosts may share. Traffic goes only to addresses inside these namespaces; the
shared services on 127.0.0.1 are never touched. :meth:`Lab.close` kills every process and
deletes every namespace and link.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.own_postgres import postgres_binaries

__all__ = ["Lab", "lab_problem"]

REDIS_PORT = 6379
PG_PORT = 5432


def lab_problem() -> str | None:
    """Why no lab can be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "runuser", "redis-server"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if postgres_binaries() is None:
        return "PostgreSQL's server binaries are not installed"
    return None


def _sh(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


class Lab:
    """Hosts on a bridge, with Redis and PostgreSQL on the ``infra`` host."""

    def __init__(self, hosts: Sequence[str], *, keep: bool = False) -> None:
        self.tag = f"{os.getpid() % 1000:03d}{random.randrange(100):02d}"
        self.subnet = random.randrange(10, 250)
        self.keep = keep
        """Keep the lab's folder (logs, data) at :meth:`close`."""
        self.root = Path(tempfile.mkdtemp(prefix="warrant-lab-"))
        os.chmod(self.root, 0o755)
        self.namespaces: dict[str, str] = {}
        self.addresses: dict[str, str] = {}
        self.links: list[str] = []
        self.procs: list[subprocess.Popen[Any]] = []
        self.in_own_pids: set[int] = set()
        self.logs: dict[str, Path] = {}
        try:
            self._make(["infra", *hosts])
            self._start_redis()
            self._start_postgres()
        except BaseException:
            self.close()
            raise

    # --- the network -------------------------------------------------------------------------
    def _make(self, names: Sequence[str]) -> None:
        for i, name in enumerate(names):
            ns = f"wlab{self.tag}-{name}"
            _sh("ip", "netns", "add", ns)
            self.namespaces[name] = ns
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            self.addresses[name] = f"10.231.{self.subnet}.{1 if i == 0 else 10 + i}"
        infra = self.namespaces["infra"]
        _sh("ip", "-n", infra, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", infra, "addr", "add", f"{self.addresses['infra']}/24", "dev", "br0")
        _sh("ip", "-n", infra, "link", "set", "br0", "up")
        for i, name in enumerate(names[1:], start=1):
            outer, inner = f"wl{self.tag}h{i}", f"wl{self.tag}p{i}"
            _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            self.links.append(outer)
            _sh("ip", "link", "set", outer, "netns", infra)
            _sh("ip", "link", "set", inner, "netns", self.namespaces[name])
            _sh("ip", "-n", infra, "link", "set", outer, "master", "br0", "up")
            ns = self.namespaces[name]
            _sh("ip", "-n", ns, "addr", "add", f"{self.addresses[name]}/24", "dev", inner)
            _sh("ip", "-n", ns, "link", "set", inner, "up")

    # --- infra's servers ---------------------------------------------------------------------
    @property
    def broker_url(self) -> str:
        return f"redis://{self.addresses['infra']}:{REDIS_PORT}/0"

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@{self.addresses['infra']}:{PG_PORT}/postgres"

    def _start_redis(self) -> None:
        self.spawn(
            "infra",
            [
                "redis-server",
                "--bind",
                self.addresses["infra"],
                "--port",
                str(REDIS_PORT),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
            label="redis",
            own_pids=False,
        )
        self.wait_until("infra", ["redis-cli", "-h", self.addresses["infra"], "ping"], "redis")

    def _start_postgres(self) -> None:
        bin_dir = postgres_binaries()
        assert bin_dir is not None
        data, sockets = self.root / "pg" / "data", self.root / "pg" / "sockets"
        sockets.mkdir(parents=True)
        for folder in (sockets.parent, sockets):
            shutil.chown(folder, user="postgres")
        _sh(
            "runuser", "-u", "postgres", "--", str(bin_dir / "initdb"), "-D", str(data),
            "-A", "trust", "-U", "postgres", "-N",
        )  # fmt: skip
        with (data / "pg_hba.conf").open("a") as hba:  # the lab's hosts, trusted like loopback
            hba.write(f"host all all 10.231.{self.subnet}.0/24 trust\n")
        self.spawn(
            "infra",
            [
                "runuser", "-u", "postgres", "--", str(bin_dir / "postgres"), "-D", str(data),
                "-p", str(PG_PORT), "-k", str(sockets), "-c",
                f"listen_addresses={self.addresses['infra']}", "-c", "fsync=off",
            ],
            label="postgres",
            own_pids=False,
        )  # fmt: skip
        self.wait_until(
            "infra",
            [str(bin_dir / "pg_isready"), "-h", self.addresses["infra"], "-p", str(PG_PORT)],
            "postgres",
        )

    # --- processes on a host -----------------------------------------------------------------
    def command(
        self, host: str, argv: Sequence[str], *, hostname: str | None = None, own_pids: bool = True
    ) -> list[str]:
        """``argv`` as run on ``host``: its network, and (``own_pids``) a pid namespace and a
        host name of its own (``hostname``, default the host's name)."""
        prefix = ["ip", "netns", "exec", self.namespaces[host]]
        if not own_pids:
            return [*prefix, *argv]
        return [
            *prefix,
            "unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM",
            "sh", "-c", 'hostname "$0" && exec "$@"', hostname or host, *argv,
        ]  # fmt: skip

    def env(self, host: str, **extra: str) -> dict[str, str]:
        """The environment of a warrant process on ``host``: infra's broker and ledger, a data
        folder and a HOME of the host's own."""
        home = self.root / "hosts" / host
        home.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "HOME": str(home),
            "WARRANT_DATA_DIR": str(home / "warrant"),
            "WARRANT_BROKER_URL": self.broker_url,
            "WARRANT_DATABASE_URL": self.database_url,
            **extra,
        }

    def spawn(
        self,
        host: str,
        argv: Sequence[str],
        *,
        label: str,
        env: dict[str, str] | None = None,
        hostname: str | None = None,
        own_pids: bool = True,
    ) -> subprocess.Popen[Any]:
        log = self.root / f"{label}.log"
        self.logs[label] = log
        with log.open("ab") as out:
            proc = subprocess.Popen(
                self.command(host, argv, hostname=hostname, own_pids=own_pids),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env if env is not None else self.env(host),
                start_new_session=True,
            )
        self.procs.append(proc)
        if own_pids:
            self.in_own_pids.add(proc.pid)
        return proc

    def run(
        self, host: str, argv: Sequence[str], *, timeout: float = 60, own_pids: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` to completion (a CLI command, say)."""
        return subprocess.run(
            self.command(host, argv, own_pids=own_pids),
            capture_output=True,
            text=True,
            env=self.env(host),
            timeout=timeout,
        )

    def wait_until(self, host: str, argv: Sequence[str], what: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.run(host, argv, timeout=10).returncode == 0:
                return
            time.sleep(0.2)
        raise TimeoutError(f"{what} not ready on {host} after {timeout}s")

    def stop(self, proc: subprocess.Popen[Any], *, timeout: float = 30) -> None:
        """SIGTERM, then SIGKILL. On a host with its own pids, to ``unshare`` alone: its death
        sends SIGTERM to the process it forked (the namespace's pid 1), as a host's shutdown
        would; a server on infra gets it with its whole process group."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if proc.pid in self.in_own_pids:
                    os.kill(proc.pid, signal.SIGTERM)
                else:
                    os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def log_tail(self, label: str, chars: int = 3000) -> str:
        log = self.logs.get(label)
        return log.read_text(errors="replace")[-chars:] if log and log.exists() else ""

    def close(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                self.stop(proc, timeout=15)
        for ns in self.namespaces.values():
            # anything still inside (a grandchild that escaped its session) goes too
            pids = subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True
            ).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self.links:  # normally gone with their namespace
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
