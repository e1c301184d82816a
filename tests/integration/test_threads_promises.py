"""The threads pool keeps every promise the prefork pool kept (issue 47), on real Redis,
PostgreSQL and Celery workers:

1. **One live attempt** however often a message is delivered: every tool message of a
   thousand commands is delivered 2-5 times to one threads-pool process with 128 threads;
   the demo service counts the calls it served per idempotency key and the ledger the
   attempts and outcomes. Before the fix a second thread of the same process declared the
   first thread's just-claimed attempt lost: two concurrent calls with one key for an
   idempotent write, a false ``WORKER_LOST_DURING_EXECUTION`` for a refund.
2. **A cancel reaches a call blocked in I/O**: a refund whose service is busy in one
   statement (a socket read: ``pg_sleep`` on its database) and a read blocked on an HTTP
   response stop within 2 s of their cancel (they ran on to their service's answer before).
   A tool blocked in a plain ``time.sleep`` cannot be reached from its thread: the worker
   says so, traced with its outcome (``tool.interrupt.unreached``).

The third promise (a slot wait does not spend the tool's deadline) is in ``test_limits``.
``WARRANT_TEST_DUPLICATED_COMMANDS`` sets the stress test's size (default 1000)."""

from __future__ import annotations

import json
import os
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc
from warrant_demo.service import calls as demo_calls

from tests import facts
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_live_attempt import outcomes
from tests.integration.test_tool_execution import refund, spec, started
from tests.integration.test_tool_threads import LEASE_ENV
from tests.integration.test_tracing import queues_to_myself
from tests.limited_tool import COUNTER_URL_ENV, CounterService
from warrant.broker.app import app
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, OutcomeRow

pytestmark = [pytest.mark.services, pytest.mark.slow]

COMMANDS = int(os.environ.get("WARRANT_TEST_DUPLICATED_COMMANDS", "1000"))
THREADS = 128
TOOL_QUEUES = ["tool.save_draft", "tool.issue_refund"]
#: How long after its cancel a call blocked in a socket read may still run (the issue's bound).
CANCEL_TO_STOP_S = 2.0


def _draft(draft_id: str) -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": "p1",
        "tool": "save_draft",
        "tool_version": "1",
        "arguments": {"draft_id": draft_id, "content": "duplicated"},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def _issued(engine: Any, run_ids: list[str]) -> list[Command]:
    with session_scope(engine) as s:
        rows = list(
            s.scalars(
                select(Command).where(Command.run_id.in_(run_ids), Command.status == "issued")
            )
        )
        s.expunge_all()
        return rows


@pytest.mark.timeout(600)
def test_every_message_delivered_two_to_five_times_starts_one_attempt(
    engine: Any, client: Any, demo: Any, worker: Any, reconciler_worker: Any, tmp_path: Path
) -> None:
    rng = random.Random(47)
    with queues_to_myself(TOOL_QUEUES):  # the tool messages wait in their queues meanwhile
        runs: dict[str, str] = {}
        for i in range(COMMANDS):
            kind = "refund" if i % 2 else "draft"
            step = (
                refund(f"ord_{uuid.uuid4().hex[:12]}")
                if kind == "refund"
                else _draft(f"d-{uuid.uuid4().hex[:12]}")
            )
            runs[client.start_run(spec([step, sc.final("Done.", "tool-1")]))] = kind
        ids = list(runs)
        wait_for(
            lambda: len(_issued(engine, ids)) == COMMANDS,
            timeout=60 + COMMANDS / 5,
            what="every command issued",
        )
        # The policy stage sent each command's message once: those are dropped, and each is
        # sent 2-5 times in a row instead, so that its copies are taken at once by threads of
        # the one process.
        with app.connection_for_write() as conn:
            for queue in TOOL_QUEUES:
                conn.default_channel.queue_purge(queue)
        copies = 0
        for cmd in _issued(engine, ids):
            version = client.get_run(cmd.run_id).version
            for _ in range(rng.randint(2, 5)):
                client.publisher.tool(
                    run_id=cmd.run_id,
                    version=version,
                    command_id=cmd.id,
                    tool=cmd.tool,
                    soft_time_limit=cmd.timeout_s,
                    time_limit=cmd.timeout_s + HARD_LIMIT_GRACE_S,
                )
                copies += 1
        threaded = WorkerProcess(
            TOOL_QUEUES,
            name="duplicated-tools",
            concurrency=THREADS,
            pool="threads",
            env=LEASE_ENV,
            log=tmp_path / "tools.log",
        )
        with threaded.serving():
            began = time.monotonic()
            statuses = Counter(
                client.wait(
                    run_id,
                    timeout=max(10.0, 120 - (time.monotonic() - began)),
                    until={"completed", "failed", "reconciling", "handoff", "cancelled"},
                ).status
                for run_id in ids
            )
            took = time.monotonic() - began
    print(f"{COMMANDS} commands, {copies} deliveries, {took:.1f} s")
    with session_scope(engine) as s:
        attempts = Counter(s.scalars(select(Command.attempts).where(Command.run_id.in_(ids))).all())
        codes = Counter(s.scalars(select(OutcomeRow.code).where(OutcomeRow.run_id.in_(ids))).all())
        tokens = s.scalars(select(Command.idempotency_token).where(Command.run_id.in_(ids))).all()
    with demo.engine.begin() as conn:
        served = Counter(
            conn.execute(
                select(demo_calls.c.idempotency_key).where(
                    demo_calls.c.idempotency_key.in_(list(tokens))
                )
            ).scalars()
        )
    print(f"runs: {dict(statuses)}; attempts per command: {dict(attempts)}; codes: {dict(codes)}")
    assert attempts == Counter({1: COMMANDS}), "a command got a second attempt"
    assert statuses == Counter({"completed": COMMANDS})
    assert codes["WORKER_LOST_DURING_EXECUTION"] == 0
    assert sorted(set(served.values())) == [1], "the service served a key twice"
    assert len(served) == COMMANDS
    in_flight = sum(len(facts.events(engine, r, "tool.delivery.in_flight")) for r in ids[:50])
    assert in_flight > 0  # the copies were delivered while their command was live, and left


# --- cancels that reach blocked I/O ----------------------------------------------------------


@pytest.fixture(scope="module")
def counter() -> Iterator[CounterService]:
    with CounterService() as service:
        yield service


@pytest.fixture
def threaded_tool_worker(
    services: Any, worker: Any, counter: CounterService, tmp_path: Path
) -> Iterator[WorkerProcess]:
    """One threads-pool worker takes the refunds and the HTTP reads (nobody else does)."""
    queues = ["tool.issue_refund", "tool.held_call"]
    with queues_to_myself(queues):
        proc = WorkerProcess(
            queues,
            name="blocked-io",
            concurrency=16,
            pool="threads",
            env={**LEASE_ENV, COUNTER_URL_ENV: counter.url},
            log=tmp_path / "tools.log",
        )
        with proc.serving():
            yield proc


def _cancel_to_stop(engine: Any, client: Any, run_ids: list[str]) -> list[float]:
    """Cancel each run (its call is in flight), and how long each call then ran on: from the
    cancel to the command's ``finished_at``, both on the database's clock."""
    for run_id in run_ids:
        started(engine, run_id)
    asked: dict[str, float] = {}
    for run_id in run_ids:
        with engine.connect() as conn:
            asked[run_id] = conn.exec_driver_sql("SELECT extract(epoch from now())").scalar_one()
        client.cancel(run_id, by="test", reason="no longer needed")
    ran_on = []
    for run_id in run_ids:
        info = client.wait(run_id, timeout=60, until={"cancelled", "failed", "completed"})
        assert info.status == "cancelled", (run_id, info.status)
        with session_scope(engine) as s:
            cmd = s.scalars(select(Command).where(Command.run_id == run_id)).one()
            assert cmd.finished_at is not None
            ran_on.append(cmd.finished_at.timestamp() - float(asked[run_id]))
    return ran_on


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else values[0]


def test_a_cancel_stops_refunds_blocked_in_a_socket_read(
    engine: Any, client: Any, demo: Any, threaded_tool_worker: WorkerProcess
) -> None:
    """Each refund's service call blocks 30 s in one statement (``slow``: ``pg_sleep``), the
    write not made yet. The cancel interrupts it: known not applied, within 2 s."""
    demo.clear_faults()
    demo.set_fault("issue_refund", "slow", times=6, delay_s=30)
    orders = [f"ord_{uuid.uuid4().hex[:10]}" for _ in range(6)]
    runs = [client.start_run(spec([refund(o), sc.final("x", "tool-1")])) for o in orders]
    ran_on = _cancel_to_stop(engine, client, runs)
    print(f"cancel to stop, refunds in a socket read: p95 {_p95(ran_on):.2f} s, {ran_on}")
    assert _p95(ran_on) <= CANCEL_TO_STOP_S
    assert all(demo.refund_count(order_id=o) == 0 for o in orders)
    codes = {outcomes(engine, r)[0][2] for r in runs}
    assert codes == {"CANCELLED_BEFORE_WRITE"}, codes
    demo.clear_faults()


def test_a_cancel_stops_a_read_blocked_on_an_http_response(
    engine: Any, client: Any, counter: CounterService, threaded_tool_worker: WorkerProcess
) -> None:
    runs = [client.start_run(sc.read_steps(1, tool="held_call", ms=30_000, n=i)) for i in range(4)]
    ran_on = _cancel_to_stop(engine, client, runs)
    print(f"cancel to stop, reads in an HTTP response: p95 {_p95(ran_on):.2f} s, {ran_on}")
    assert _p95(ran_on) <= CANCEL_TO_STOP_S
    assert {outcomes(engine, r)[0][2] for r in runs} == {"CANCELLED_DURING_EXECUTION"}


def test_a_call_blocked_where_no_interruption_reaches_is_reported(
    engine: Any, client: Any, counter: CounterService, threaded_tool_worker: WorkerProcess
) -> None:
    """The read calls its service through a client of its own (not the context's): its thread
    sits in a socket read nothing reaches from another thread. The cancel cannot stop it; the
    worker logs it, and the outcome is traced with how late the call ended (a tool like this
    belongs on the process pool)."""
    # 8 s: the call outlives its cancel by >= 2 s even when the cancel takes seconds to reach
    # the worker (under a full suite's load it took more than 2 s of a 4 s call)
    entered = len(counter.budgets)
    run_id = client.start_run(sc.read_steps(1, tool="held_call", ms=8_000, own_client=True))
    started(engine, run_id)
    # the cancel must find the call inside its own read (a cancel that came while the tool was
    # still setting its client up reached it: CI saw that once under the full suite's load)
    wait_for(lambda: len(counter.budgets) > entered, what="the call at its service")
    client.cancel(run_id, by="test", reason="no longer needed")
    client.wait(run_id, timeout=60, until={"cancelled", "failed", "completed", "handoff"})
    late = facts.events(engine, run_id, "tool.interrupt.unreached")
    assert len(late) == 1, late
    assert late[0].details["why"] == "cancel"
    assert late[0].details["late_s"] >= 2.0
    assert threaded_tool_worker.log is not None
    assert "blocks where no interruption reaches" in threaded_tool_worker.log.read_text()


# --- a killed worker's unacknowledged messages ---------------------------------------------


def _unacked_for(queue: str) -> int:
    """Messages of ``queue`` that Redis holds as delivered and not yet acknowledged."""
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        entries = client.hvals("unacked")
    return sum(1 for raw in entries if json.loads(raw)[2] == queue)


def test_a_killed_workers_unacknowledged_messages_come_back_within_a_minute(
    engine: Any, client: Any, counter: CounterService, worker: Any, tmp_path: Path
) -> None:
    """Eight reads are in flight on one threads-pool worker when it is SIGKILLed: Redis keeps
    their messages as unacknowledged. Their lease (renewed while the worker lived) ends, and
    they go back to the queue within a minute, not the hour the visibility timeout was; the
    next worker runs them (a read is safe to run again)."""
    queues = ["tool.held_call"]
    if not app.conf.broker_url.startswith("redis"):
        pytest.skip("unacknowledged messages are kept by the Redis transport")
    env = {**LEASE_ENV, COUNTER_URL_ENV: counter.url}
    with queues_to_myself(queues):
        doomed = WorkerProcess(
            queues, name="doomed", concurrency=16, pool="threads", env=env, log=tmp_path / "a.log"
        )
        doomed.wait_ready()
        runs = [
            client.start_run(sc.read_steps(1, tool="held_call", ms=5_000, n=i)) for i in range(8)
        ]
        for run_id in runs:
            started(engine, run_id)
        assert _unacked_for("tool.held_call") == 8
        doomed.kill_all()
        killed = time.monotonic()
        heir = WorkerProcess(
            queues,
            name="heir",
            concurrency=16,
            pool="threads",
            env={**env, "WARRANT_VISIBILITY_TIMEOUT_S": "15"},
            log=tmp_path / "b.log",
        )
        with heir.serving():
            wait_for(
                lambda: _unacked_for("tool.held_call") == 0,
                timeout=60,
                what="the killed worker's messages back in their queue",
            )
            back = time.monotonic() - killed
            for run_id in runs:
                info = client.wait(run_id, timeout=60)
                assert info.status == "completed", (run_id, info.status, info.stop_reason)
    print(f"the killed worker's 8 unacknowledged messages were back in {back:.1f} s")
    assert back <= 60
