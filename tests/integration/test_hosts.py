"""Workers on several hosts (network namespaces, pid namespaces and host names of their own;
see ``tests/hosts.py``): each worker process registers on its own, whatever its node name or
host name, and ``warrant tools check`` sees every one of them."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import IN_CI, wait_for
from tests.hosts import Lab, lab_problem

pytestmark = [pytest.mark.slow]

CLI = [sys.executable, "-m", "warrant.runner.cli"]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    problem = lab_problem()
    if problem:
        if IN_CI:
            pytest.fail(f"CI=true and no multi-host lab can be made: {problem}")
        pytest.skip(problem)
    made = Lab(["one", "two"])
    try:
        done = made.run("one", [*CLI, "db", "upgrade", "--json"], timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        yield made
    finally:
        made.close()


def tools_check(lab: Lab, host: str = "one") -> tuple[int, dict[str, Any]]:
    done = lab.run(host, [*CLI, "tools", "check", "--json"])
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_every_tool_worker_on_one_host_and_on_another_shows_in_tools_check(lab):
    """Two tool workers on host ``one`` (its pid space and the machine's host name) and one on
    host ``two``, which has its own pid namespace and *the same host name*: three rows, three
    process identities. Stopping one leaves the other two registered."""
    code, report = tools_check(lab)
    assert code == 1 and not report["ok"] and report["workers"] == []
    assert "search_public" in report["unserved"]  # "agree" with no tool worker was a lie

    host_name = socket.gethostname()
    worker = [*CLI, "worker", "--role", "tool", "--loglevel", "warning"]
    first = lab.spawn("one", worker, label="one-first", own_pids=False)
    lab.spawn(
        "one", [*worker, "--queues", "tool.search_public"], label="one-second", own_pids=False
    )
    lab.spawn("two", worker, label="two", hostname=host_name)

    def registered() -> dict[str, Any] | None:
        _, report = tools_check(lab)
        return report if len(report["workers"]) == 3 else None

    report = wait_for(registered, timeout=90, what="three tool workers registered")
    assert report["ok"] and report["unserved"] == [] and report["disagreements"] == []
    processes = {w["process"] for w in report["workers"]}
    assert len(processes) == 3
    spaces = {p.rsplit(".", 1)[1] for p in processes}
    assert len(spaces) == 2  # host one's two workers share a pid space; host two has its own
    nodes = [w["node"] for w in report["workers"]]
    assert all(n.startswith("tool-") and n.endswith(f"@{host_name}") for n in nodes), nodes
    narrowed = [w for w in report["workers"] if w["queues"] == ["tool.search_public"]]
    assert len(narrowed) == 1

    lab.stop(first)

    def two_left() -> dict[str, Any] | None:
        _, report = tools_check(lab)
        return report if len(report["workers"]) == 2 else None

    left = wait_for(two_left, timeout=60, what="the stopped worker's row removed")
    assert {w["process"] for w in left["workers"]} < processes
    assert left["ok"]  # the narrowed worker and host two's still serve every queue


_HOLD_A_SESSION = """
import sys, time
from sqlalchemy import text
from warrant.ledger.db import engine_for
engine = engine_for(sys.argv[1])
conn = engine.connect()
print(conn.execute(text("SELECT pg_backend_pid()")).scalar_one(), flush=True)
conn.commit()  # idle, not in a transaction: only the server's keepalives can end it
time.sleep(3600)
"""

_SESSION_ALIVE = """
import sys
import psycopg
with psycopg.connect(sys.argv[1], connect_timeout=5) as conn:
    row = conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (int(sys.argv[2]),))
    sys.exit(0 if row.fetchone() else 1)
"""


def test_a_host_that_vanishes_leaves_no_session_on_postgres_for_long(lab):
    """Host ``one`` holds an idle ledger connection, then loses power (its packets dropped,
    its processes killed: no FIN, no reset). The server's own keepalives, which every ledger
    connection sets (``tcp_keepalives_*``, ``tcp_user_timeout``, which also bounds unanswered
    probes), end that session within about the larger of idle + interval * count and the user
    timeout (30 s by default), not the system's two hours."""
    import subprocess
    import time

    from bench.chaos_hosts import net
    from warrant.runner.settings import WarrantSettings

    holder = subprocess.Popen(
        lab.command("one", [sys.executable, "-c", _HOLD_A_SESSION, lab.database_url]),
        env=lab.env("one"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        backend = int(holder.stdout.readline())

        def alive() -> bool:
            argv = [sys.executable, "-c", _SESSION_ALIVE, lab.database_url, str(backend)]
            return lab.run("two", argv, timeout=30).returncode == 0

        assert alive()
        net.cut(lab, "one")
        net.kill_host(lab, "one")
        cut_at = time.monotonic()
        s = WarrantSettings()
        probes = s.db_keepalives_idle_s + s.db_keepalives_interval_s * s.db_keepalives_count
        bound = max(probes, s.db_tcp_user_timeout_s)
        wait_for(lambda: not alive(), timeout=bound + 20, what="the vanished host's session ended")
        print(f"vanished host's session ended after {time.monotonic() - cut_at:.1f} s")
    finally:
        net.heal(lab, "one")
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
