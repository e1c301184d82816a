"""The planner runs on Celery's threads pool, a one-process policy worker on the solo pool
(``role_pool``).

The task runs in the consuming process: no pool child, no pipe. What prefork gave those roles
must still hold: a run goes through them, and a worker that dies between its commit and its
publish (the whole worker, here) loses nothing: the stall sweep re-publishes the run and the
restarted worker carries it on, with no step done twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import RECONCILER_ENV, WorkerProcess, wait_for
from tests.integration.test_tracing import queues_to_myself, settle_by_sweeps
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command
from warrant.runner.stack.roles import role_pool, worker_command

pytestmark = [pytest.mark.services]

ROLE_QUEUES = {
    "planner": ["planner"],
    "policy": ["policy"],
    "tool": ["tool.search_public"],
    "reconciler": ["reconciler"],
}


def test_the_planner_and_tools_are_threaded_policy_solo() -> None:
    """The planner and the tool role wait on threads (``WARRANT_PLANNER_CONCURRENCY`` /
    ``WARRANT_TOOL_CONCURRENCY``); policy is solo with one process, prefork with several; the
    reconciler and ``tool-process`` keep prefork."""
    from warrant.runner.settings import WarrantSettings

    assert [role_pool(r, 1) for r in ROLE_QUEUES] == ["threads", "solo", "threads", "prefork"]
    assert [role_pool(r, 2) for r in ROLE_QUEUES] == ["threads", "prefork", "threads", "prefork"]
    assert role_pool("tool-process", 1) == "prefork"
    command = worker_command("policy")
    assert command[command.index("-P") + 1] == "solo"
    command = worker_command("planner")
    assert command[command.index("-P") + 1] == "threads"
    assert command[command.index("-c") + 1] == str(WarrantSettings().planner_concurrency)
    command = worker_command("planner", concurrency=8)
    assert command[command.index("-c") + 1] == "8"


@pytest.fixture
def role_workers(
    services: Any, stages_to_myself: None, tmp_path: Path
) -> Iterator[dict[str, WorkerProcess]]:
    """One worker per role, one process each, on the pools ``warrant worker`` would choose; no
    other worker consumes their queues meanwhile. The policy worker dies (``os._exit``) after
    its first commit, once."""
    crash_once = tmp_path / "crash-once"
    workers: dict[str, WorkerProcess] = {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(queues_to_myself([q for qs in ROLE_QUEUES.values() for q in qs]))
        for role, queues in ROLE_QUEUES.items():
            env = dict(RECONCILER_ENV)
            if role == "policy":
                env |= {
                    "WARRANT_CRASH_POINT": "policy:after_commit",
                    "WARRANT_CRASH_ONCE_FILE": str(crash_once),
                }
            proc = WorkerProcess(
                queues,
                name=f"solo-{role}",
                concurrency=1,
                pool=role_pool(role, 1),
                env=env,
                log=tmp_path / f"{role}.log",
            )
            workers[role] = stack.enter_context(proc.serving())
        yield workers


def _commands(engine: Any, run_id: str) -> list[tuple[int, str, int]]:
    with session_scope(engine) as s:
        rows = s.scalars(select(Command).where(Command.run_id == run_id).order_by(Command.step))
        return [(c.step, c.status, c.attempts) for c in rows]


def _pool_children(worker: WorkerProcess) -> list[psutil.Process]:
    return psutil.Process(worker.proc.pid).children(recursive=True)


def test_a_run_goes_through_solo_workers_and_survives_one_dying_after_its_commit(
    engine: Any, client: Any, role_workers: dict[str, WorkerProcess], tmp_path: Path
) -> None:
    assert _pool_children(role_workers["planner"]) == []
    assert _pool_children(role_workers["policy"]) == []
    assert _pool_children(role_workers["tool"]) == []  # threads: no pool child

    spec = sc.spec([sc.search("p1"), sc.search("p2"), sc.final("Two reads.", "tool-2")])
    first = client.start_run(spec)
    info = client.wait(first, timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert _commands(engine, first) == [(1, "completed", 1), (2, "completed", 1)]

    # The policy worker dies between its commit and its publish, taking its message with it
    # (unacknowledged: Redis gives it back only after the visibility timeout).
    (tmp_path / "crash-once").write_text("")
    second = client.start_run(spec)
    policy = role_workers["policy"]
    wait_for(lambda: policy.proc.poll() is not None, timeout=30, what="the policy worker dying")
    assert policy.proc.returncode == 70
    policy.restart()
    info = settle_by_sweeps(client, second)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.events(engine, second, "run.republished")  # the sweep carried it on
    assert _commands(engine, second) == [(1, "completed", 1), (2, "completed", 1)]
    assert facts.outcomes(engine, second) == 2
    assert len(facts.events(engine, second, "command.issued")) == 2  # no step decided twice
