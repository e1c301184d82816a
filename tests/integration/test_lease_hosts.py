"""One live attempt that no clock, no blocked parent and no stray signal can break (issue 30).

- A tool host whose clock runs 120 s ahead (``faketime``) must not declare a live attempt lost:
  the lease is judged on the database's clock only.
- A prefork parent that cannot enforce its time limits (``SIGSTOP``, what an event loop blocked
  in a synchronous broker call amounts to) must not let an attempt outlive them: the pool
  process ends the attempt itself (``warrant.broker.tool.deadline``).
- A late attempt whose effect another attempt already recorded under the same token is
  superseded; it never reopens the run.
- A SIGUSR1 that reaches a pool process between tasks never fails its next task.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import DRAFT_QUEUES, LIVE_WORKERS, WorkerProcess, slack, wait_for
from tests.integration.test_live_attempt import outcomes
from tests.integration.test_reconciler import reconciliations, settle
from tests.integration.test_tool_execution import command_of, draft, refund, spec, started, uid
from warrant.broker.queues import TASK_TOOL
from warrant.broker.tool.lease import holder_of
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.db import session_scope
from warrant.ledger.models import OutcomeRow

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: A queue no session worker consumes: only the host ahead gets what is sent there.
AHEAD_QUEUE = "tool.send_message"


@pytest.fixture(scope="module")
def writers(services, worker, reconciler_worker, tmp_path_factory) -> Iterator[WorkerProcess]:
    """The only consumer of the write queues: one pool process (its pid is every attempt's)."""
    log = tmp_path_factory.mktemp("logs") / "writers.log"
    others = [
        w for w in LIVE_WORKERS if w.proc.poll() is None and set(w.queues) & set(DRAFT_QUEUES)
    ]
    for other in others:
        other.stop()
    proc = WorkerProcess(list(DRAFT_QUEUES), name="writers", concurrency=1, log=log)
    try:
        with proc.serving():
            yield proc
    finally:
        for other in others:
            other.restart()


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


def outcome_row(engine, run_id: str) -> OutcomeRow | None:
    with session_scope(engine) as s:
        return s.query(OutcomeRow).filter_by(run_id=run_id).order_by(OutcomeRow.id).first()


# --- the database's clock ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ahead(writers, tmp_path_factory) -> Iterator[WorkerProcess]:
    """A tool host whose clock is 120 s ahead, consuming a queue of its own."""
    # libfaketime preloaded into the worker itself: the faketime wrapper forks, and stopping
    # the wrapper would leave the worker running.
    libs = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not libs:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    log = tmp_path_factory.mktemp("logs") / "ahead.log"
    env = {"LD_PRELOAD": str(libs[0]), "FAKETIME": "+120s", "FAKETIME_DONT_RESET": "1"}
    probe = [sys.executable, "-c", "import time; print(time.time())"]
    ahead_by = float(subprocess.check_output(probe, env={**os.environ, **env})) - time.time()
    assert 110 < ahead_by < 130, f"libfaketime did not move the clock ({ahead_by:.1f} s)"
    proc = WorkerProcess([AHEAD_QUEUE], name="ahead", concurrency=1, log=log, env=env)
    with proc.serving():
        yield proc


def test_a_host_whose_clock_runs_ahead_leaves_a_live_attempt_alone(
    engine, client, demo, writers, ahead
):
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "slow", delay_s=3)
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")]))
    started(engine, run_id)
    cmd = command_of(engine, run_id)
    sent = time.monotonic()
    client.publisher.app.send_task(  # the same message, delivered to the host ahead
        TASK_TOOL,
        kwargs={
            "run_id": run_id,
            "version": client.get_run(run_id).version,
            "command_id": cmd.id,
            "tool": cmd.tool,
        },
        queue=AHEAD_QUEUE,
        soft_time_limit=cmd.timeout_s,
        time_limit=cmd.timeout_s + HARD_LIMIT_GRACE_S,
    )
    wait_for(
        lambda: (
            facts.events(engine, run_id, "tool.delivery.in_flight") or outcome_row(engine, run_id)
        ),
        what="the host ahead judged the attempt",
    )
    first = outcome_row(engine, run_id)
    assert first is None or first.code != "WORKER_LOST_DURING_EXECUTION", (
        f"declared lost {time.monotonic() - sent:.1f} s after the redelivery: "
        f"{[(e.event, e.details) for e in facts.events(engine, run_id)]}"
    )
    assert facts.events(engine, run_id, "tool.delivery.in_flight")
    info = settle(client, run_id, timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.refund_count(order_id=order) == 1
    assert outcomes(engine, run_id) == [(1, "succeeded", None, None)]
    assert command_of(engine, run_id).attempts == 1


# --- a parent that cannot enforce the limits --------------------------------------------------


def test_a_stopped_parent_does_not_let_an_attempt_outlive_its_limits(engine, client, demo, writers):
    order = f"ord_{uuid.uuid4().hex[:10]}"
    demo.set_fault("issue_refund", "slow", delay_s=40)
    run_id = client.start_run(spec([refund(order), sc.final("Refunded.", "tool-1")]))
    started(engine, run_id)
    cmd = command_of(engine, run_id)
    holder = holder_of(cmd.worker)
    assert holder is not None and holder.pid is not None
    os.kill(writers.proc.pid, signal.SIGSTOP)  # the prefork parent: no timer of it fires
    t0 = time.monotonic()
    try:
        row = wait_for(
            lambda: outcome_row(engine, run_id),
            timeout=cmd.timeout_s + HARD_LIMIT_GRACE_S + 10,
            what="the attempt ended at its own soft limit",
        )
        took = time.monotonic() - t0
        assert (row.attempt, row.status, row.code) == (1, "unknown", "TOOL_TIMEOUT")
        assert row.duration_ms is not None and row.duration_ms < (cmd.timeout_s + 1.5) * 1000
        assert took < cmd.timeout_s + slack(1.5)
        # the process ended its attempt and is alive, waiting for its (stopped) parent
        os.kill(holder.pid, 0)
        assert len(facts.events(engine, run_id, "tool.started")) == 1
        assert command_of(engine, run_id).attempts == 1
        assert demo.refund_count(order_id=order) == 0
    finally:
        os.kill(writers.proc.pid, signal.SIGCONT)
    demo.clear_faults()
    info = settle(client, run_id, timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.refund_count(order_id=order) == 1
    assert outcomes(engine, run_id) == [
        (1, "unknown", "TOOL_TIMEOUT", "not_applied"),
        (2, "succeeded", None, None),
    ]


# --- stray signals ----------------------------------------------------------------------------


def test_a_signal_between_tasks_never_fails_the_next_task(engine, client, demo, writers):
    first = client.start_run(spec([draft(uid("before")), sc.final("Saved.", "tool-1")]))
    assert settle(client, first, timeout=30).status == "completed"
    holder = holder_of(command_of(engine, first).worker)
    assert holder is not None and holder.pid is not None
    os.kill(holder.pid, signal.SIGUSR1)  # a soft time limit delivered late, between tasks
    did = uid("after")
    run_id = client.start_run(spec([draft(did), sc.final("Saved.", "tool-1")]))
    info = settle(client, run_id, timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert outcomes(engine, run_id) == [(1, "succeeded", None, None)]
    assert holder_of(command_of(engine, run_id).worker).pid == holder.pid  # same process
    assert demo.draft_count(draft_id=did) == 1


# --- a late attempt whose effect is already recorded ------------------------------------------


@pytest.fixture
def sole_sweeper(reconciler_worker) -> Iterator[None]:
    """This test's sweeps are the only ones: the session's reconciler worker is stopped while it
    runs (sweeps asked of it by earlier tests wait in its queue). Another sweeper would judge
    the attempt too and publish the retry to the real broker, where this test never sees it."""
    reconciler_worker.stop()
    try:
        yield
    finally:
        reconciler_worker.restart()


def test_a_late_attempt_whose_effect_is_already_recorded_is_superseded(
    engine, client, demo, sole_sweeper
):
    """The over-running attempt is declared lost, judged not applied, and the same command
    (same token) is retried and succeeds; the run completes. Then the first attempt returns
    with the very refund the retry recorded: traced as superseded, the run stays completed."""
    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.broker.policy.stage import policy_evaluate
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import sweep
    from warrant.broker.tool.stage import tool_execute
    from warrant.runner.settings import WarrantSettings

    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher)

    def drive_until_tool() -> dict:
        while True:
            wait_for(lambda: publisher.sent, what="a message to drive")
            name, m = publisher.sent.pop(0)
            if name == "tool":
                return m
            (planner_step if name == "planner" else policy_evaluate)(ctx, m["run_id"], m["version"])

    def fault_taken(command_id: str) -> list[str | None]:
        """The faults the service's calls with this command's key got (none logged yet: [])."""
        with engine.begin() as conn:
            return list(
                conn.execute(
                    text(
                        "SELECT k.fault FROM commands c JOIN demo_calls k"
                        " ON k.idempotency_key = c.idempotency_token WHERE c.id = :id"
                    ),
                    {"id": command_id},
                ).scalars()
            )

    # The first attempt sleeps long enough that the sweeps below (slow on a loaded machine)
    # judge it before it returns: it must come back only after its retry was recorded. The
    # fault is the service's, per tool: a call of another test's leftover run can take it first
    # (seen twice in the full suite); then this run ends at once and another is started.
    for _ in range(3):
        publisher.sent.clear()
        order = f"ord_{uuid.uuid4().hex[:10]}"
        run_id = client.start_run(
            spec([refund(order), sc.final("Refunded.", "tool-1")]), publish=False
        )
        publisher.planner(run_id, 1)
        m = drive_until_tool()
        results: list[str] = []
        late = threading.Thread(
            target=lambda run_id=run_id, m=m, results=results: results.append(
                tool_execute(
                    ctx, run_id, m["version"], m["command_id"], worker="w@h/1", tool="issue_refund"
                )
            )
        )
        demo.set_fault("issue_refund", "slow", delay_s=20)
        late.start()
        started(engine, run_id)
        taken = wait_for(functools.partial(fault_taken, m["command_id"]), what="the call logged")
        if taken == ["slow"]:
            break
        late.join(30)
    else:
        raise AssertionError("three attempts in a row missed their slow fault")
    demo.clear_faults()  # the first attempt is inside its sleep; the retry runs at once
    with engine.begin() as conn:  # the attempt is now past its lease
        conn.execute(
            text("UPDATE commands SET started_at = now() - interval '1 hour' WHERE id = :id"),
            {"id": m["command_id"]},
        )
    settings = WarrantSettings(lease_margin_s=0)
    last: list[Any] = []

    def judged() -> bool:
        last[:] = [sweep(ctx, settings)]
        return last[0].locked and any(n == "tool" for n, _ in publisher.sent)

    try:
        wait_for(judged, what="judged not applied and retried with the same token")
    except AssertionError as timed_out:  # what the sweeps saw, for the next time it happens
        with engine.begin() as conn:
            row = conn.execute(
                text(
                    "SELECT c.status, c.started_at, c.heartbeat_at, c.timeout_s, now(), r.status"
                    " FROM commands c JOIN runs r ON r.id = c.run_id WHERE c.id = :id"
                ),
                {"id": m["command_id"]},
            ).first()
        sent = [n for n, _ in publisher.sent]
        raise AssertionError(
            f"{timed_out}: last sweep {last}, command {row}, sent {sent}"
        ) from None
    retry = drive_until_tool()
    assert tool_execute(ctx, run_id, retry["version"], retry["command_id"], tool="issue_refund")
    while client.get_run(run_id).status == "running":
        name, msg = publisher.sent.pop(0)
        (planner_step if name == "planner" else policy_evaluate)(ctx, msg["run_id"], msg["version"])
    assert client.get_run(run_id).status == "completed"
    late.join(30)
    assert results == ["superseded"]
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert demo.refund_count(order_id=order) == 1
    assert outcomes(engine, run_id) == [
        (1, "unknown", "COMMAND_LEASE_EXPIRED", "not_applied"),
        (2, "succeeded", None, None),
    ]
    assert reconciliations(engine, run_id) == ["not_applied"]
    superseded = facts.events(engine, run_id, "tool.attempt.superseded")
    assert [
        (e.details["attempt"], e.details["effect"], e.details["recorded_attempt"])
        for e in superseded
    ] == [(1, "already_recorded", 2)]
    assert not facts.events(engine, run_id, "effect.found_late")
    assert not facts.events(engine, run_id, "handoff.created")
