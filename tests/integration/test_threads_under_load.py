"""What threads share, under load (issue 31): one planner process and one tool process on
their threads pools, with tracing on, take 48 runs at once (three planner steps and two
tool calls of 300 ms each per run). The engine, its sessions, the publisher, the tools' deps
and the tracer are shared by every thread of a process; if any of them mixed up two runs,
it would show here: a span in another run's trace, a step counted twice, a command
started twice, an outcome recorded on the wrong command."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import RECONCILER_ENV, WorkerProcess, wait_for
from tests.integration.test_tool_threads import LEASE_ENV, wait_step
from tests.integration.test_tracing import (
    NAMESPACE,
    ledger_trace_id,
    queues_to_myself,
    start_traced,
)
from tests.local_otlp import LocalOTLP
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, OutcomeRow
from warrant.runner.stack.roles import role_concurrency, role_pool

pytestmark = [pytest.mark.services, pytest.mark.slow]

RUNS = 48


@pytest.fixture
def otlp() -> Iterator[LocalOTLP]:
    with LocalOTLP() as receiver:
        yield receiver


@pytest.fixture
def threaded_stack(
    services: Any,
    stages_to_myself: None,
    otlp: LocalOTLP,
    tmp_path: Path,
) -> Iterator[None]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
        "OTEL_SERVICE_NAME": NAMESPACE,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        **RECONCILER_ENV,
        **LEASE_ENV,
    }
    roles = {"planner": ["planner"], "policy": ["policy"], "tool": ["tool.wait_read"]}
    with contextlib.ExitStack() as stack:
        stack.enter_context(queues_to_myself([q for qs in roles.values() for q in qs]))
        for role, queues in roles.items():
            threads = role_concurrency(role, None)
            proc = WorkerProcess(
                queues,
                name=f"loaded-{role}",
                concurrency=threads,
                pool=role_pool(role, threads),
                env=env,
                log=tmp_path / f"{role}.log",
            )
            stack.enter_context(proc.serving())
        yield


def _two_waits() -> dict[str, Any]:
    steps = [wait_step(300, n=1, pid="p1"), wait_step(300, n=2, pid="p2")]
    return sc.spec([*steps, sc.final("done", "tool-2")], grants=[{"capability": "bench:read"}])


def test_threads_keep_runs_apart_under_load(
    engine: Any,
    client: Any,
    otlp: LocalOTLP,
    threaded_stack: None,
) -> None:
    assert role_pool("tool", role_concurrency("tool", None)) == "threads"
    runs = [start_traced(client, otlp, _two_waits()) for _ in range(RUNS)]
    for run_id in runs:
        info = client.wait(run_id, timeout=120)
        assert (info.status, info.stop_reason, info.step) == (
            "completed",
            "FINAL_ANSWER_VALIDATED",
            3,
        ), run_id
    with session_scope(engine) as s:
        commands = s.query(Command).filter(Command.run_id.in_(runs)).all()
        outcomes = s.query(OutcomeRow).filter(OutcomeRow.run_id.in_(runs)).all()
        assert Counter(c.run_id for c in commands) == dict.fromkeys(runs, 2)
        assert all(c.attempts == 1 and c.status == "completed" for c in commands)
        by_command = {c.id: c.run_id for c in commands}
        assert sorted(by_command[o.command_id] for o in outcomes) == sorted(runs * 2)
        assert all(by_command[o.command_id] == o.run_id for o in outcomes)
        assert all(o.status == "succeeded" for o in outcomes)
    for run_id in runs:
        assert len(facts.events(engine, run_id, "tool.started")) == 2

    traces = {run_id: ledger_trace_id(engine, run_id) for run_id in runs}
    assert len(set(traces.values())) == RUNS

    def complete() -> bool:
        """Every run's spans exported: two tool calls and three planner steps each (a run's
        last planner span may reach the collector after the run is seen completed)."""
        spans = otlp.spans()
        tools = Counter(
            s.attributes.get("warrant.run_id") for s in spans if s.name == "tool.execute"
        )
        steps = Counter(
            s.attributes.get("warrant.run_id") for s in spans if s.name == "planner.propose"
        )
        return all(tools[r] == 2 and steps[r] >= 3 for r in runs)

    wait_for(complete, timeout=30, what="every run's tool and planner spans")
    # every span that names a run is in that run's trace, and each run has exactly its own
    for span in otlp.spans():
        run_id = span.attributes.get("warrant.run_id")
        if run_id in traces:
            assert span.trace_id == traces[run_id], (span.name, run_id)
    proposes = Counter(
        s.attributes.get("warrant.run_id") for s in otlp.spans() if s.name == "planner.propose"
    )
    assert all(proposes[r] == 3 for r in runs), proposes
