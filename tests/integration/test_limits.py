"""Shared limits hold across worker processes (issue 31, item 2), on real Redis, PostgreSQL
and Celery workers: a model endpoint's requests per minute across two planner processes, and
a tool's calls in flight across two tool processes. Each fact is counted by the external
service itself (the fake model server, the counter service); the runs wait, traced, and all
complete. Bad limits are refused at start with ``INVALID_LIMIT``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import LIVE_WORKERS, WorkerProcess
from tests.integration.test_cli import warrant
from tests.integration.test_llm_planner import FINAL, SEARCH_CALL, llm_spec
from tests.limited_tool import COUNTER_URL_ENV, CounterService
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command
from warrant.runner.stack.roles import role_pool

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: A "minute" of the test deployment, and what the limits allow in one.
WINDOW_S = 2
REQUESTS_PER_WINDOW = 4
MAX_IN_FLIGHT = 2
#: A request the limiter let through at t reaches the model server a little later (the
#: planner thread builds its HTTP client first; two busy cores): a broken limit shows spans
#: near 0 (sixteen requests from six threads in well under a second).
ARRIVAL_SLACK_S = 0.5


@pytest.fixture(scope="module")
def counter() -> Iterator[CounterService]:
    with CounterService() as service:
        yield service


@pytest.fixture(scope="module")
def limited(
    worker: WorkerProcess,
    fake_openai: Any,
    counter: CounterService,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, list[WorkerProcess]]]:
    """The session's planner-consuming workers are stopped meanwhile. Two planner processes
    (threads pool) and two ``held_call`` tool processes (prefork, three each: six calls could
    run at once) share the deployment's limits through Redis; a fifth worker serves the rest."""
    logs = tmp_path_factory.mktemp("limits")
    env = {
        "WARRANT_MODEL_LIMITS": json.dumps(
            {fake_openai.base_url: {"requests_per_minute": REQUESTS_PER_WINDOW}}
        ),
        "WARRANT_TOOL_LIMITS": json.dumps({"held_call": {"max_in_flight": MAX_IN_FLIGHT}}),
        "WARRANT_LIMITS_WINDOW_S": str(WINDOW_S),
        COUNTER_URL_ENV: counter.url,
    }
    paused = [w for w in LIVE_WORKERS if w.proc.poll() is None and "planner" in w.queues]
    rest = sorted({q for w in paused for q in w.queues} - {"planner"})
    for w in paused:
        w.stop()

    def start(name: str, queues: list[str], pool: str) -> WorkerProcess:
        return WorkerProcess(
            queues, name=name, concurrency=3, pool=pool, env=env, log=logs / f"{name}.log"
        )

    try:
        planners = [start(f"planner-{i}", ["planner"], role_pool("planner", 3)) for i in (1, 2)]
        tools = [start(f"held-{i}", ["tool.held_call"], "prefork") for i in (1, 2)]
        others = start("limits-rest", rest, "prefork")
        for w in [*planners, *tools, others]:
            w.wait_ready()
        yield {"planners": planners, "tools": tools}
        for w in [*planners, *tools, others]:
            w.stop()
    finally:
        for w in paused:
            w.restart()


def _served(process: WorkerProcess, task: str) -> int:
    """Tasks of ``task`` the process finished (its log, at level info)."""
    assert process.log is not None
    return process.log.read_text().count(f"Task {task}[")


def test_a_model_endpoint_rate_limit_holds_across_two_planner_processes(
    engine: Any, client: Any, limited: dict[str, list[WorkerProcess]], fake_openai: Any
) -> None:
    runs_n = 8  # 16 model calls, 4 per window: about four windows
    models = [f"limited-{uuid.uuid4().hex[:8]}" for _ in range(runs_n)]
    for name in models:
        fake_openai.script(name, [{"call": SEARCH_CALL}, {"call": FINAL}])
    runs = [client.start_run(llm_spec(fake_openai, name)) for name in models]
    for run_id in runs:
        info = client.wait(run_id, timeout=120)
        assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), run_id
        assert info.model_calls == 2
    # counted by the model server: never more than the limit's requests in any window
    arrivals = sorted(r["at"] for name in models for r in fake_openai.requests_for(name))
    assert len(arrivals) == 2 * runs_n
    spans = [
        arrivals[i + REQUESTS_PER_WINDOW] - arrivals[i]
        for i in range(len(arrivals) - REQUESTS_PER_WINDOW)
    ]
    print(f"shortest span of {REQUESTS_PER_WINDOW + 1} requests: {min(spans):.3f} s")
    assert min(spans) >= WINDOW_S - ARRIVAL_SLACK_S, spans
    # the runs waited, and said so
    waited = [e.details for run_id in runs for e in facts.events(engine, run_id, "limit.waited")]
    assert waited, "no run waited for the limit"
    endpoint = f"endpoint:{fake_openai.base_url}"
    assert {(w["limit"], w["key"]) for w in waited} == {("requests_per_minute", endpoint)}
    assert max(w["waited_s"] for w in waited) > 0.2
    # both planner processes asked the model
    assert all(_served(p, "warrant.planner.step") > 0 for p in limited["planners"])


def test_a_tool_in_flight_cap_holds_across_two_tool_processes(
    engine: Any, client: Any, limited: dict[str, list[WorkerProcess]], counter: CounterService
) -> None:
    runs_n = 8  # six pool processes could call at once; the cap lets two
    runs = [client.start_run(sc.read_steps(1, tool="held_call", ms=400)) for _ in range(runs_n)]
    for run_id in runs:
        info = client.wait(run_id, timeout=120)
        assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), run_id
        assert facts.commands(engine, run_id) == 1
    # counted by the external service: never more than the cap at once, and the cap was used
    assert len(counter.calls) == runs_n
    print(f"peak calls in flight at the service: {counter.peak} (cap {MAX_IN_FLIGHT})")
    assert counter.peak == MAX_IN_FLIGHT, counter.peak
    waited = [e.details for run_id in runs for e in facts.events(engine, run_id, "limit.waited")]
    assert waited, "no call waited for a slot"
    assert {(w["limit"], w["key"]) for w in waited} == {("max_in_flight", "tool:held_call")}
    assert all(w["deferrals"] >= 1 and w["waited_s"] > 0 for w in waited)
    waiting = [e for run_id in runs for e in facts.events(engine, run_id, "limit.waiting")]
    assert len(waiting) == len(waited)
    # no attempt was charged the wait: each command started once
    with session_scope(engine) as s:
        attempts = s.scalars(select(Command.attempts).where(Command.run_id.in_(runs))).all()
    assert sorted(attempts) == [1] * runs_n
    assert all(_served(t, "warrant.tool.execute") > 0 for t in limited["tools"])


def test_a_wait_for_a_slot_does_not_spend_the_tools_deadline(
    engine: Any, client: Any, limited: dict[str, list[WorkerProcess]], counter: CounterService
) -> None:
    """Issue 47, item 2: eight calls of 3.5 s under a cap of two wait up to ~10.5 s for a slot,
    longer than the tool's 10 s limit. Each attempt's deadline starts when the attempt does:
    every call tells the service it has (nearly) the tool's whole limit left, none is given up,
    and the service never serves more than the cap at once."""
    counter.calls.clear()
    counter.budgets.clear()
    counter.peak = 0
    runs = [client.start_run(sc.read_steps(1, tool="held_call", ms=3500)) for _ in range(8)]
    for run_id in runs:
        info = client.wait(run_id, timeout=120)
        assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), run_id
    waited = [e.details for run_id in runs for e in facts.events(engine, run_id, "limit.waited")]
    longest = max(w["waited_s"] for w in waited)
    print(f"longest slot wait {longest:.1f} s; budgets the service was told: {counter.budgets}")
    assert longest > 6.0  # the last calls waited for most of the tool's limit
    assert len(counter.budgets) == 8 and min(counter.budgets) > 8.0, counter.budgets
    assert counter.peak <= MAX_IN_FLIGHT, counter.peak
    with session_scope(engine) as s:
        attempts = s.scalars(select(Command.attempts).where(Command.run_id.in_(runs))).all()
    assert sorted(attempts) == [1] * 8


BAD_MODEL_LIMITS = json.dumps({"http://127.0.0.1:9/v1": {"requests_per_minute": 0}})
BAD_TOOL_LIMITS = json.dumps({"no_such_tool": {"max_in_flight": 2}})


@pytest.mark.parametrize(
    "env",
    [{"WARRANT_MODEL_LIMITS": BAD_MODEL_LIMITS}, {"WARRANT_TOOL_LIMITS": BAD_TOOL_LIMITS}],
)
def test_warrant_worker_refuses_bad_limits_with_the_code(env: dict[str, str]) -> None:
    done = warrant("worker", "--role", "planner", "--json", env=env, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["error"]["code"] == "INVALID_LIMIT"
    said = warrant("worker", "--role", "planner", env=env, timeout=60)
    assert said.returncode == 2 and "[INVALID_LIMIT]" in said.stderr, said.stderr


def test_a_plain_celery_worker_refuses_bad_limits(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "celery", "-A", "warrant.broker.app", "worker", "-Q", "x"]
    env = {**os.environ, "WARRANT_TOOL_LIMITS": BAD_TOOL_LIMITS}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "SettingsInvalid" in done.stderr and "no_such_tool" in done.stderr, done.stderr[-2000:]
