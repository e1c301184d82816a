"""The bench's third pipeline: DBOS durable workflows on a DBOS queue, driven from outside.

``python -m bench`` runs it beside warrant and the bare Celery pipeline when the ``dbos``
package is installed (``pip install -e '.[bench]'``; ``make bench`` does). One DBOS workflow
per run (``bench.dbos_worker``), each agent step three checkpointed DBOS steps writing one
``bench_rows`` row each, so latency and completion are read from the same rows, the same way,
as the baseline's. DBOS keeps its own state in a system database of its own next to the
bench's (``<bench database>_dbos``), recreated for every bench.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text

from warrant.ledger.db import engine_for

WORKER_MODULE = "bench.dbos_worker"
APP = "warrant-bench"
QUEUE = "bench"
WORKFLOW = "bench.run"
#: The latency part's agent runs (``bench.latency``): a workflow and a queue of their own.
AGENT_QUEUE = "bench-agents"
AGENT_WORKFLOW = "bench.agent"
#: One version for the client's enqueues and the worker, whatever the code's hash.
VERSION = "bench"


def missing() -> str | None:
    """Why the DBOS pipeline cannot run here, or None: the bench runs without the extra."""
    if importlib.util.find_spec("dbos") is None:
        return "the `dbos` package is not installed (pip install -e '.[bench]'; `make bench` does)"
    return None


def version() -> str:
    from importlib.metadata import version as dist_version

    return dist_version("dbos")


def system_url(database_url: str) -> str:
    return f"{database_url}_dbos"


class DbosPipeline:
    """The worker process and the client that enqueues runs on its queue."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.database = env["WARRANT_DATABASE_URL"]
        self.env = {**env, "WARRANT_BENCH_DBOS_URL": system_url(self.database)}
        self.logs = logs
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: Any = None

    def start(self, timeout: float = 120) -> None:
        """A fresh system database, the worker, and a client once the worker has migrated it
        and registered the queue (it writes a ``ready`` row then)."""
        sysdb = self.env["WARRANT_BENCH_DBOS_URL"]
        admin, name = sysdb.rsplit("/", 1)
        with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        self.logs.mkdir(parents=True, exist_ok=True)
        out = open(self.logs / "dbos.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE],
            env=self.env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        ready = f"dbos-ready-{self.proc.pid}"
        end = time.monotonic() + timeout
        while not self._rows(ready, "ready"):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"DBOS worker not ready (see {self.logs / 'dbos.log'})")
            time.sleep(0.1)
        from dbos import DBOSClient

        self.client = DBOSClient(system_database_url=sysdb, application_name=APP)

    def _rows(self, run_id: str, stage: str) -> int:
        with engine_for(self.database).connect() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM bench_rows WHERE run_id=:r AND stage=:s"),
                    {"r": run_id, "s": stage},
                ).scalar_one()
            )

    def run(self, run_id: str, steps: int) -> None:
        """Enqueue one run (one workflow); the bench waits for its ``done`` row."""
        self.client.enqueue(
            {
                "queue_name": QUEUE,
                "workflow_name": WORKFLOW,
                "workflow_id": run_id,
                "app_version": VERSION,
            },
            run_id,
            steps,
        )

    def agent(self, run_id: str) -> None:
        """Enqueue one agent run (the latency part); it writes a ``done`` row at its end."""
        self.client.enqueue(
            {
                "queue_name": AGENT_QUEUE,
                "workflow_name": AGENT_WORKFLOW,
                "workflow_id": run_id,
                "app_version": VERSION,
            },
            run_id,
        )

    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        if self.client is not None:
            self.client.destroy()
            self.client = None
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
