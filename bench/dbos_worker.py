"""The DBOS pipeline's worker process: one durable workflow per run, on a DBOS queue.

    python -m bench.dbos_worker     (started by ``python -m bench``, never by hand)

The same shape as the bare Celery pipeline (``bench.baseline``): each agent step is three
steps, planner → policy → tool, each writing one row to PostgreSQL; here they are DBOS steps
of one workflow, so DBOS checkpoints each step's result in its system database after the step
returns (the durability the Celery pipelines get from re-queued, late-acknowledged messages).
The workflow runs where DBOS dequeues it, in this process, not in the bench client, so the
client measures from outside as it does for the Celery workers.
"""

from __future__ import annotations

import os
import signal
import threading

from dbos import DBOS, DBOSConfig
from sqlalchemy import text

from bench.dbos_pipeline import APP, QUEUE, VERSION, WORKFLOW
from warrant.ledger.db import engine_for

DATABASE = os.environ["WARRANT_DATABASE_URL"]
SYSTEM_DATABASE = os.environ["WARRANT_BENCH_DBOS_URL"]
#: Workflows this process runs at once: the Celery pipelines run three hops at once (one
#: process per stage), so at most three steps are in flight in each pipeline.
CONCURRENCY = int(os.environ.get("WARRANT_BENCH_DBOS_CONCURRENCY", "3"))
#: How often the queue thread looks for enqueued workflows (DBOS polls; default 1 s). 10 ms
#: keeps a freed slot from idling between runs in the throughput measure.
POLL_S = float(os.environ.get("WARRANT_BENCH_DBOS_POLL_S", "0.01"))


def _row(run_id: str, step: int, stage: str) -> None:
    """One row per stage, as the baseline's tasks write (same table, same statement)."""
    with engine_for(DATABASE).begin() as conn:
        conn.execute(
            text("INSERT INTO bench_rows (run_id, step, stage) VALUES (:r, :s, :t)"),
            {"r": run_id, "s": step, "t": stage},
        )


@DBOS.step(name="bench.planner")
def planner(run_id: str, step: int, total: int) -> None:
    _row(run_id, step, "done" if step > total else "planner")


@DBOS.step(name="bench.policy")
def policy(run_id: str, step: int) -> None:
    _row(run_id, step, "policy")


@DBOS.step(name="bench.tool")
def tool(run_id: str, step: int) -> None:
    _row(run_id, step, "tool")


@DBOS.workflow(name=WORKFLOW)
def run(run_id: str, total: int) -> None:
    """Like the baseline's chain, the planner of step ``total + 1`` writes the ``done`` row."""
    for step in range(1, total + 2):
        planner(run_id, step, total)
        if step <= total:
            policy(run_id, step)
            tool(run_id, step)


def main() -> None:
    config: DBOSConfig = {
        "name": APP,
        "system_database_url": SYSTEM_DATABASE,
        "application_version": VERSION,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=CONCURRENCY, polling_interval_sec=POLL_S)
    _row(f"dbos-ready-{os.getpid()}", 0, "ready")  # the bench client waits for this row
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
