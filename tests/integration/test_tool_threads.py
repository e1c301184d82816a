"""Tool calls that wait without holding a process (issue 31): the ``tool`` role on Celery's
threads pool, its attempts' leases kept by heartbeat (``broker.tool._attempt_watch``).

Two threaded tool workers (the pool and concurrency ``warrant worker tool`` chooses) take the
demo tools' queues. Asserted on facts: the ledger's commands (who started them, when they
started and finished, their heartbeats and attempts), outcomes and trace events, the demo
service's effect counts, and the exit status of the worker whose attempt got stuck."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import LIVE_WORKERS, RECONCILER_ENV, WorkerProcess, slack, wait_for
from tests.integration.test_live_attempt import deliver_again, outcomes
from tests.integration.test_reconciler import settle
from tests.integration.test_tool_execution import command_of, refund, spec, started
from warrant.broker.tool._attempt_watch import AttemptWatch
from warrant.broker.tool.deadline import HARD_LIMIT_EXIT
from warrant.broker.tool.lease import holder_of
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command
from warrant.runner.stack.roles import role_concurrency, role_pool

pytestmark = [pytest.mark.services, pytest.mark.slow]

QUEUES = ["tool.issue_refund", "tool.save_draft", "tool.lookup", "tool.wait_read"]
#: Short leases, so that a lost heartbeat is seen in seconds (the reconciler has the same).
LEASE_ENV = {
    "WARRANT_LEASE_HEARTBEAT_S": RECONCILER_ENV["WARRANT_LEASE_HEARTBEAT_S"],
    "WARRANT_LEASE_HEARTBEAT_TIMEOUT_S": RECONCILER_ENV["WARRANT_LEASE_HEARTBEAT_TIMEOUT_S"],
}
BENCH = {"capability": "bench:read"}


def wait_step(ms: int, n: int = 1, pid: str = "p1") -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "wait_read",
        "tool_version": "1",
        "arguments": {"n": n, "ms": ms},
        "reason_summary": "",
        "source_observation_ids": [],
    }


@pytest.fixture(scope="module")
def threaded_tools(
    services: Any, worker: Any, reconciler_worker: Any, tmp_path_factory: Any
) -> Iterator[list[WorkerProcess]]:
    """Every other consumer of these queues is stopped meanwhile; two threaded tool workers
    take them."""
    paused = [w for w in LIVE_WORKERS if w.proc.poll() is None and set(w.queues) & set(QUEUES)]
    rest = {q for w in paused for q in w.queues} - set(QUEUES)
    for w in paused:
        w.stop()
    logs = tmp_path_factory.mktemp("logs")
    threads = role_concurrency("tool", None)
    workers = [
        WorkerProcess(
            QUEUES,
            name=f"threaded-tools-{i}",
            concurrency=threads,
            pool=role_pool("tool", threads),
            log=logs / f"tools-{i}.log",
            env=LEASE_ENV,
        )
        for i in (1, 2)
    ]
    others = [WorkerProcess(sorted(rest), name="not-these", log=logs / "rest.log")] if rest else []
    try:
        for w in [*workers, *others]:
            w.wait_ready()
        yield workers
    finally:
        for w in [*workers, *others]:
            w.stop()
        for w in paused:
            w.restart()


@pytest.fixture(autouse=True)
def _clean_faults(demo: Any) -> Iterator[None]:
    demo.clear_faults()
    yield
    demo.clear_faults()


def _commands(engine: Any, run_ids: list[str]) -> list[Command]:
    with session_scope(engine) as s:
        rows = s.query(Command).filter(Command.run_id.in_(run_ids)).all()
        s.expunge_all()
        return rows


def _peak_overlap(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    peak = level = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def test_many_tool_calls_wait_together_in_each_threaded_process(
    engine: Any, client: Any, threaded_tools: list[WorkerProcess]
) -> None:
    assert role_pool("tool", role_concurrency("tool", None)) == "threads"
    runs = [
        client.start_run(
            sc.spec([wait_step(2000, n=i), sc.final("done", "tool-1")], grants=[BENCH])
        )
        for i in range(16)
    ]
    for run_id in runs:
        info = client.wait(run_id, timeout=60)
        assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), run_id
    rows = _commands(engine, runs)
    assert all(c.attempts == 1 and c.heartbeat_at is not None for c in rows)
    spans: dict[str, list[tuple[float, float]]] = {}
    for c in rows:
        assert c.started_at is not None and c.finished_at is not None
        spans.setdefault(c.worker or "", []).append(
            (c.started_at.timestamp(), c.finished_at.timestamp())
        )
    peaks = {worker: _peak_overlap(s) for worker, s in spans.items()}
    print(f"tool calls in flight at once, per process: {peaks}")
    # 16 calls of 2 s each on two processes: each process held several at once (prefork with
    # one process per worker would hold one)
    assert sum(peaks.values()) >= 12, peaks


def test_a_cancel_interrupts_a_running_threaded_tool_call(
    engine: Any, client: Any, threaded_tools: list[WorkerProcess]
) -> None:
    # wait_read never asks whether its run is cancelled: only the worker can interrupt it
    run_id = client.start_run(sc.spec([wait_step(30_000), sc.final("x", "tool-1")], grants=[BENCH]))
    started(engine, run_id)
    asked = time.monotonic()
    client.cancel(run_id, by="test", reason="no longer needed")
    info = client.wait(run_id, timeout=20, until={"cancelled", "failed", "completed"})
    took = time.monotonic() - asked
    assert info.status == "cancelled"
    assert outcomes(engine, run_id) == [(1, "failed", "CANCELLED_DURING_EXECUTION", None)]
    print(f"cancel to cancelled run: {took:.2f} s (heartbeat every 0.5 s; the call had 30 s left)")
    assert took < slack(10)


def test_a_threaded_tool_call_ends_at_its_time_limit(
    engine: Any, client: Any, threaded_tools: list[WorkerProcess]
) -> None:
    run_id = client.start_run(sc.spec([wait_step(20_000), sc.final("x", "tool-1")], grants=[BENCH]))
    info = client.wait(run_id, timeout=30)
    assert outcomes(engine, run_id)[0][1:3] == ("failed", "TOOL_TIMEOUT")
    assert info.status in ("completed", "failed")
    cmd = command_of(engine, run_id)
    assert cmd.finished_at is not None and cmd.started_at is not None
    assert (cmd.finished_at - cmd.started_at).total_seconds() < 10  # wait_read's limit is 5 s


def test_a_stuck_attempt_keeps_its_lease_until_its_worker_retires(
    engine: Any, client: Any, demo: Any, threaded_tools: list[WorkerProcess]
) -> None:
    """The refund commits, then the call hangs in one long sleep no exception reaches: past
    its hard limit (5 + 5 s) the worker retires and exits; only then does the heartbeat stop,
    the lease end, and the reconciler find the effect applied. While it lived, a second
    delivery left it alone."""
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "slow_after_commit", delay_s=120)
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")]))
    deliver_again(client, engine, run_id)  # the second delivery found the attempt live
    holder = holder_of(command_of(engine, run_id).worker)
    assert holder is not None
    stuck = next(w for w in threaded_tools if w.proc.pid == holder.pid)
    wait_for(lambda: stuck.proc.poll() is not None, timeout=40, what="the stuck worker retired")
    assert stuck.proc.returncode == HARD_LIMIT_EXIT
    info = settle(client, run_id, timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.refund_count(order_id=order) == 1
    assert command_of(engine, run_id).attempts == 1
    assert facts.events(engine, run_id, "command.lease_expired")
    assert outcomes(engine, run_id)[0][1:4] == ("unknown", "COMMAND_LEASE_EXPIRED", "applied")
    stuck.restart()


def test_the_attempt_watch_wakes_for_a_sooner_limit_not_for_each_attempt(engine: Any) -> None:
    """Issue 52: an attempt that begins wakes the watch only if its soft limit comes before
    the watch's next wake, and one that ends never does (each used to: the loop walked every
    attempt at each start and end of one, quadratic in the attempts in flight); a sooner
    limit still interrupts on time."""
    watch = AttemptWatch(engine, "test-watch", beat_s=0.5, timeout_s=30.0)
    turns: list[float] = []
    enforce = watch._enforce

    def counted(attempts: Any, now: float) -> None:
        turns.append(now)
        enforce(attempts, now)

    watch._enforce = counted  # type: ignore[method-assign]
    began = time.monotonic()
    for i in range(60):  # an attempt every 10 ms, each over in 15 ms, none near its limit
        with watch.watching(command_id=f"c-{i}", run_id="r", began=time.monotonic(), timeout_s=20):
            time.sleep(0.015)
        time.sleep(0.01)
    spent = time.monotonic() - began
    assert len(turns) <= spent / 0.5 + 2, (len(turns), spent)
    with watch.watching(command_id="soon", run_id="r", began=time.monotonic(), timeout_s=0.3) as a:
        wait_for(lambda: a.interrupted == "deadline", timeout=2, what="the deadline interrupt")
