"""The DBOS pipeline's worker process: one durable workflow per run, on a DBOS queue.

    python -m bench.dbos_worker     (started by ``python -m bench``, never by hand)

The same shape as the bare Celery pipeline (``bench.baseline``): each agent step is three
steps, planner → policy → tool, each writing one row to PostgreSQL; here they are DBOS steps
of one workflow, so DBOS checkpoints each step's result in its system database after the step
returns (the durability the Celery pipelines get from re-queued, late-acknowledged messages).
The workflow runs where DBOS dequeues it, in this process, not in the bench client, so the
client measures from outside as it does for the Celery workers.

The latency part (``bench.latency``) runs another workflow here, on a queue of its own: an
agent run of three model calls and two tool calls, each a DBOS step making a real HTTP call
to the bench's fake model and fake tool service (``WARRANT_BENCH_FAKE_MODEL_URL``,
``WARRANT_BENCH_FAKE_TOOL_URL``), like warrant's planner and ``http_read`` tool.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any

from dbos import DBOS, DBOSConfig
from sqlalchemy import text

from bench.dbos_pipeline import AGENT_QUEUE, AGENT_WORKFLOW, APP, QUEUE, VERSION, WORKFLOW
from bench.fakes import TOOL_CALLS, thread_client
from warrant.ledger.db import engine_for

DATABASE = os.environ["WARRANT_DATABASE_URL"]
SYSTEM_DATABASE = os.environ["WARRANT_BENCH_DBOS_URL"]
#: Workflows this process runs at once: the Celery pipelines run three hops at once (one
#: process per stage), so at most three steps are in flight in each pipeline.
CONCURRENCY = int(os.environ.get("WARRANT_BENCH_DBOS_CONCURRENCY", "3"))
#: How often the queue thread looks for enqueued workflows (DBOS polls; default 1 s). 10 ms
#: keeps a freed slot from idling between runs in the throughput measure.
POLL_S = float(os.environ.get("WARRANT_BENCH_DBOS_POLL_S", "0.01"))
#: Agent workflows this process runs at once (the latency part: every run at once).
AGENT_CONCURRENCY = int(os.environ.get("WARRANT_BENCH_DBOS_AGENT_CONCURRENCY", "1024"))
#: The system database's connection pool (DBOS's default unless set).
POOL = os.environ.get("WARRANT_BENCH_DBOS_POOL")
MODEL_URL = os.environ.get("WARRANT_BENCH_FAKE_MODEL_URL", "")
TOOL_URL = os.environ.get("WARRANT_BENCH_FAKE_TOOL_URL", "")


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


@DBOS.step(name="bench.model")
def model_call(observations: list[str]) -> dict[str, Any]:
    """One chat completion: the observations so far in the prompt, as warrant's planner shows
    them (the fake model answers from them); the proposed function's name and arguments."""
    prompt = "\n".join(f"- {o} [source: tool]\n{{}}" for o in observations)
    body = {"model": "bench", "messages": [{"role": "user", "content": prompt}]}
    response = thread_client().post(f"{MODEL_URL}/v1/chat/completions", json=body, timeout=30)
    response.raise_for_status()
    function = response.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    return {"name": function["name"], "arguments": json.loads(function["arguments"])}


@DBOS.step(name="bench.http_read")
def tool_call(run_id: str, n: int) -> dict[str, Any]:
    """The tool: a GET of the fake tool service, as ``http_read`` does."""
    response = thread_client().get(TOOL_URL, params={"n": n, "run": run_id}, timeout=15)
    response.raise_for_status()
    return {"n": n, "status": response.status_code, "chars": len(response.text)}


@DBOS.step(name="bench.done")
def done(run_id: str) -> None:
    _row(run_id, TOOL_CALLS + 1, "done")


@DBOS.workflow(name=AGENT_WORKFLOW)
def agent(run_id: str) -> None:
    """Model calls until the model answers ``final`` (three: two tool calls between)."""
    observations: list[str] = []
    for _ in range(TOOL_CALLS + 1):
        proposal = model_call(observations)
        if proposal["name"] == "final":
            break
        tool_call(run_id, proposal["arguments"]["n"])
        observations.append(f"tool-{len(observations) + 1}")
    done(run_id)


def main() -> None:
    config: DBOSConfig = {
        "name": APP,
        "system_database_url": SYSTEM_DATABASE,
        "application_version": VERSION,
        "log_level": "WARNING",
    }
    if POOL:
        config["sys_db_pool_size"] = int(POOL)
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=CONCURRENCY, polling_interval_sec=POLL_S)
    DBOS.register_queue(
        AGENT_QUEUE, worker_concurrency=AGENT_CONCURRENCY, polling_interval_sec=POLL_S
    )
    _row(f"dbos-ready-{os.getpid()}", 0, "ready")  # the bench client waits for this row
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
