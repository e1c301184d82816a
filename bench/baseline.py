"""The floor for this design: a bare Celery pipeline of the same shape.

Three chained tasks per step on three queues (planner, policy, tool), each writing one row
to PostgreSQL and publishing the next, with the same at-least-once settings as warrant.
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue
from sqlalchemy import text

from warrant.ledger.db import engine_for

BROKER = os.environ["WARRANT_BROKER_URL"]
DATABASE = os.environ["WARRANT_DATABASE_URL"]
QUEUES = ("bench.planner", "bench.policy", "bench.tool")

app = Celery("bench", broker=BROKER)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    # the same monitoring settings as warrant in this run (`python -m bench --events`)
    worker_send_task_events=os.environ.get("BENCH_TASK_EVENTS") == "1",
    task_send_sent_event=os.environ.get("BENCH_TASK_EVENTS") == "1",
    task_queues=[Queue(q, routing_key=q) for q in QUEUES],
    task_routes={
        "bench.planner": {"queue": "bench.planner"},
        "bench.policy": {"queue": "bench.policy"},
        "bench.tool": {"queue": "bench.tool"},
    },
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_rows (
    id bigserial PRIMARY KEY, run_id text NOT NULL, step int NOT NULL, stage text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp())
"""


def _row(run_id: str, step: int, stage: str) -> None:
    with engine_for(DATABASE).begin() as conn:
        conn.execute(
            text("INSERT INTO bench_rows (run_id, step, stage) VALUES (:r, :s, :t)"),
            {"r": run_id, "s": step, "t": stage},
        )


@app.task(name="bench.planner")
def planner(run_id: str, step: int, total: int) -> None:
    if step > total:
        _row(run_id, step, "done")
        return
    _row(run_id, step, "planner")
    app.send_task("bench.policy", kwargs={"run_id": run_id, "step": step, "total": total})


@app.task(name="bench.policy")
def policy(run_id: str, step: int, total: int) -> None:
    _row(run_id, step, "policy")
    app.send_task("bench.tool", kwargs={"run_id": run_id, "step": step, "total": total})


@app.task(name="bench.tool")
def tool(run_id: str, step: int, total: int) -> None:
    _row(run_id, step, "tool")
    app.send_task("bench.planner", kwargs={"run_id": run_id, "step": step + 1, "total": total})
