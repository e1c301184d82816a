"""One planner process holds many model calls at once (issue 31): the planner role runs on
Celery's threads pool (``role_pool``), so runs waiting on a slow model wait side by side,
not one after another.

The fact asserted is counted by the model server itself: how many of its requests were being
answered at the same moment, all sent by the one planner process of the test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import LIVE_WORKERS, WorkerProcess, wait_for
from tests.integration.test_llm_planner import FINAL, SEARCH_CALL, llm_spec
from warrant.broker.planner._run_watch import RunWatch
from warrant.ledger.db import autocommit_engine, session_scope
from warrant.ledger.models import Run
from warrant.runner.stack.roles import role_concurrency, role_pool

pytestmark = [pytest.mark.services, pytest.mark.slow]

RUNS = 24
MODEL_LATENCY_S = 1.0


@pytest.fixture
def one_threaded_planner(worker: WorkerProcess, tmp_path: Path) -> Iterator[WorkerProcess]:
    """The session's workers that consume the planner queue are stopped meanwhile; one
    planner worker on the pool ``warrant worker`` chooses (threads) takes the queue, and a
    prefork worker the rest of what they served."""
    paused = [w for w in LIVE_WORKERS if w.proc.poll() is None and "planner" in w.queues]
    rest = sorted({q for w in paused for q in w.queues} - {"planner"})
    for w in paused:
        w.stop()
    try:
        threads = role_concurrency("planner", None)
        planner = WorkerProcess(
            ["planner"],
            name="threaded-planner",
            concurrency=threads,
            pool=role_pool("planner", threads),
            log=tmp_path / "planner.log",
        )
        others = WorkerProcess(rest, name="not-planner", concurrency=2, log=tmp_path / "rest.log")
        with planner.serving(), others.serving():
            yield planner
    finally:
        for w in paused:
            w.restart()


def test_runs_waiting_on_a_slow_model_wait_together_in_one_planner_process(
    engine: Any, client: Any, one_threaded_planner: WorkerProcess, fake_openai: Any
) -> None:
    models = [f"slow-{uuid.uuid4().hex[:8]}" for _ in range(RUNS)]
    for name in models:  # each run's own script: a search, then the final answer, each 1 s
        fake_openai.script(
            name,
            [
                {"delay": MODEL_LATENCY_S, "call": SEARCH_CALL},
                {"delay": MODEL_LATENCY_S, "call": FINAL},
            ],
        )
    runs = [client.start_run(llm_spec(fake_openai, name)) for name in models]
    for run_id in runs:
        info = client.wait(run_id, timeout=120)
        assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), run_id
        retried = len(facts.events(engine, run_id, "model.retry.scheduled"))  # a refused connect
        assert info.model_calls == 2 + retried
        assert facts.commands(engine, run_id) == 1
    # one process, one thread per waiting call: most of the runs' calls were in flight at once
    # (the solo pool it replaces held exactly one)
    print(f"peak model calls in flight: {fake_openai.peak_in_flight} of {RUNS} runs")
    assert fake_openai.peak_in_flight >= RUNS // 2


def test_a_cancel_abandons_the_model_call_in_flight_and_charges_it(
    engine: Any, client: Any, one_threaded_planner: WorkerProcess, fake_openai: Any
) -> None:
    """The model would answer after 20 s; the run is cancelled while it thinks. The planner
    process stops waiting within its run watch's interval (1 s), the request is cancelled,
    and the call still counts: one model call, its prompt's estimated tokens."""
    model = f"slow-{uuid.uuid4().hex[:8]}"
    fake_openai.script(model, [{"delay": 20.0, "call": FINAL}])
    spec = llm_spec(fake_openai, model)
    spec["planner"]["timeout_s"] = 30
    run_id = client.start_run(spec)
    wait_for(lambda: fake_openai.requests_for(model), what="the model call arrived")
    asked = time.monotonic()
    client.cancel(run_id, by="test", reason="not needed")
    charged = wait_for(
        lambda: facts.events(engine, run_id, "model.usage.charged"),
        timeout=10,
        what="the abandoned call charged",
    )
    took = time.monotonic() - asked
    print(f"cancel to abandoned model call: {took:.2f} s (the model had 20 s to go)")
    details = charged[0].details
    assert details["code"] == "MODEL_CALL_ABANDONED" and details["estimated"] is True
    info = client.get_run(run_id)
    assert info.status == "cancelled"
    assert info.model_calls == 1
    with session_scope(engine) as s:
        run = s.get(Run, run_id)
        assert run is not None and run.tokens_used == details["tokens"] > 0


def test_the_run_watch_asks_once_per_interval_however_many_runs_start(
    engine: Any, client: Any
) -> None:
    """Issue 52: the watch thread's one query per interval stays one when a step starts
    watching its run every few milliseconds (each used to wake it: a query per model call),
    and a cancelled run's signal is still set within an interval or two."""
    every_s = 0.4
    queries: list[float] = []

    def counted(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "status IN ('cancelling', 'cancelled')" in statement:
            queries.append(time.monotonic())

    run_id = client.start_run(sc.spec([sc.final("Done.", "user-1")]), publish=False)
    asks = autocommit_engine(engine)  # the watch's own (each statement its own transaction)
    event.listen(asks, "before_cursor_execute", counted)
    try:
        watch = RunWatch(engine, every_s=every_s)
        started = time.monotonic()
        with watch.watching(run_id) as cancelled:
            others = [watch.watching(f"never-{i}") for i in range(60)]
            for held in others:  # a step starting every 20 ms for 1.2 s
                held.__enter__()
                time.sleep(0.02)
            waited = time.monotonic() - started
            assert len(queries) <= waited / every_s + 1, (len(queries), waited)
            client.cancel(run_id, by="test", reason="issue 52")
            wait_for(cancelled.is_set, timeout=3 * every_s + 2, what="the cancel signal")
            for held in others:
                held.__exit__(None, None, None)
    finally:
        event.remove(asks, "before_cursor_execute", counted)
