"""What the latency part samples while a workload runs: the RSS of every worker process (each
worker's main process and its children, ``VmRSS`` of ``/proc/<pid>/status``) and the
PostgreSQL server's connections, with their peaks.

The server is shared (another engineer's tests use it): when its connections come within
:data:`RESERVE` of ``max_connections``, the meter trips, and the bench stops the measure
instead of starving everyone else's sessions.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

__all__ = ["RESERVE", "Meter", "cpu_seconds", "rss_mb", "server_counters", "tree"]

#: Connections left free on the shared server; fewer trip the meter.
RESERVE = 15


def rss_mb(pid: int) -> float:
    """``VmRSS`` of one process in MiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree(pid: int) -> list[int]:
    """A process and its children (a prefork pool's processes), recursively."""
    import psutil

    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return []


def cpu_seconds(groups: dict[str, list[int]]) -> dict[str, float]:
    """CPU time (user + system) so far per group: its processes' trees, plus the PostgreSQL
    and Redis servers' processes (all of them: the servers are shared) and this process."""
    import os

    import psutil

    def spent(pids: list[int]) -> float:
        total = 0.0
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        return total

    out = {g: spent([p for m in mains for p in tree(m)]) for g, mains in groups.items()}
    for server in ("postgres", "redis"):
        out[server] = spent(
            [p.pid for p in psutil.process_iter(["name"]) if server in (p.info["name"] or "")]
        )
    out["bench client"] = spent([os.getpid()])
    return out


#: Seconds after a workload before its PostgreSQL counts are all reported: a busy backend
#: reports at most once a second, an idle one within ten (PostgreSQL 15's statistics).
SETTLE_S = 11.0


def server_counters(
    admin_url: str, databases: list[str], broker_url: str, *, settle: bool = False
) -> dict[str, float]:
    """The servers' work so far: PostgreSQL transactions (``pg_stat_database``: commits and
    rollbacks) and sessions (connections opened: each one a server process forked) in the
    bench's ``databases``, their statements (``pg_stat_statements``, when
    the server preloads it; else absent) and the Redis server's commands
    (``total_commands_processed``: the whole server's, shared with whoever else uses it).
    ``settle``: at the end of a workload, first wait :data:`SETTLE_S` and until the
    transaction count holds still for a second (at most 3 s more)."""
    import time

    import psycopg
    import redis

    stats = redis.Redis.from_url(broker_url).info("stats")  # before idle workers poll more
    out: dict[str, float] = {"redis_commands": float(stats["total_commands_processed"])}
    if settle:
        time.sleep(SETTLE_S)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        previous, deadline = -1.0, time.monotonic() + (3 if settle else 0)
        while True:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT coalesce(sum(xact_commit), 0), coalesce(sum(xact_rollback), 0),"
                " coalesce(sum(sessions), 0) FROM pg_stat_database WHERE datname = ANY(%s)",
                [databases],
            ).fetchone() or (0, 0, 0)
            out["pg_commits"], out["pg_rollbacks"] = float(row[0]), float(row[1])
            out["pg_sessions"] = float(row[2])
            if out["pg_commits"] == previous or time.monotonic() >= deadline:
                break
            previous = out["pg_commits"]
            time.sleep(1.0)
        try:
            calls = conn.execute(
                "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s"
                " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = ANY(%s)",
                [databases],
            ).fetchone()
            out["pg_statements"] = float(calls[0] if calls else 0)
        except psycopg.Error:
            pass  # not installed, or not in shared_preload_libraries
    return out


@dataclasses.dataclass
class Sample:
    """RSS per role (MiB, its processes summed) and per process."""

    roles: dict[str, float]
    processes: dict[str, dict[int, float]]


def snapshot(roles: dict[str, list[int]]) -> Sample:
    processes = {
        role: {p: rss_mb(p) for m in mains for p in tree(m)} for role, mains in roles.items()
    }
    return Sample({r: sum(ps.values()) for r, ps in processes.items()}, processes)


class Meter:
    """Samples ``roles`` (role -> main pids) every ``interval`` seconds in a thread: peak RSS
    per role and per process, peak PostgreSQL connections (the server's and the bench
    databases')."""

    def __init__(
        self,
        roles: dict[str, list[int]],
        admin_url: str,
        databases: list[str],
        interval: float,
        others: dict[str, list[int]],
        broker_url: str,
    ) -> None:
        self.roles, self.admin_url, self.databases = roles, admin_url, databases
        self.broker_url = broker_url
        self.counted: dict[str, float] = {}
        """The servers' work over the measure (:func:`server_counters`; set on exit)."""
        self.interval = interval
        self.groups = {**roles, **others}
        self.cpu: dict[str, float] = {}
        """CPU seconds per group over the measure (set on exit)."""
        self.peak = snapshot(roles)
        self.peak_server_connections = self.peak_bench_connections = 0
        self.tripped: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="latency-meter")

    def __enter__(self) -> Meter:
        self._counted_before = server_counters(self.admin_url, self.databases, self.broker_url)
        self._cpu_before = cpu_seconds(self.groups)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        after = cpu_seconds(self.groups)
        self.cpu = {g: after[g] - self._cpu_before.get(g, 0.0) for g in after}
        self._stop.set()
        self._thread.join(10)
        self._sample_rss()
        counted = server_counters(self.admin_url, self.databases, self.broker_url, settle=True)
        self.counted = {k: v - self._counted_before[k] for k, v in counted.items()}

    def _loop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            limit = int(_one(conn, "SHOW max_connections"))
            while not self._stop.wait(self.interval):
                self._sample_rss()
                self._sample_connections(conn, limit)

    def _sample_rss(self) -> None:
        now = snapshot(self.roles)
        for role, mb in now.roles.items():
            self.peak.roles[role] = max(self.peak.roles.get(role, 0.0), mb)
            peaks = self.peak.processes.setdefault(role, {})
            for pid, pmb in now.processes[role].items():
                peaks[pid] = max(peaks.get(pid, 0.0), pmb)

    def _sample_connections(self, conn: Any, limit: int) -> None:
        server = int(
            _one(
                conn, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            )
        )
        ours = int(
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY(%s)", [self.databases]
            ).fetchone()[0]
        )
        self.peak_server_connections = max(self.peak_server_connections, server)
        self.peak_bench_connections = max(self.peak_bench_connections, ours)
        if server >= limit - RESERVE and self.tripped is None:
            self.tripped = (
                f"PostgreSQL has {server} client connections of max_connections={limit}"
                f" (the bench's databases: {ours}): stopping before the shared server is full"
            )


def _one(conn: Any, statement: str) -> Any:
    return conn.execute(statement).fetchone()[0]
