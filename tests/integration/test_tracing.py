"""Tracing end to end: real workers export real OTLP/HTTP to a local receiver.

One trace per run, whoever publishes its messages (here: the reconciler's stalled-run sweep);
one ``service.name`` per role; a collector that is not there costs the CLI nothing noticeable.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import RECONCILER_ENV, WorkerProcess, queues_to_myself, wait_for
from tests.local_otlp import LocalOTLP
from warrant.broker import telemetry
from warrant.broker.queues import TASK_PLANNER, TASK_POLICY, TASK_RECONCILE, TASK_TOOL
from warrant.ledger.db import session_scope
from warrant.ledger.models import Run
from warrant.runner.stack.roles import role_pool

pytestmark = [pytest.mark.services]

PLANNER, POLICY, TOOL, RECONCILER = (
    telemetry.SERVICE_NAMES[r] for r in ("planner", "policy", "tool", "reconciler")
)
#: What docker-compose sets for every process: a namespace, not every role's name.
NAMESPACE = "warrant-tests"


@pytest.fixture
def otlp() -> Iterator[LocalOTLP]:
    with LocalOTLP() as receiver:
        yield receiver


@pytest.fixture
def traced_workers(
    services: Any, stages_to_myself: None, otlp: LocalOTLP, tmp_path: Path
) -> Iterator[dict[str, WorkerProcess]]:
    """One worker per role, each exporting to ``otlp``, on the pool ``warrant worker`` would
    choose (planner and policy: solo, tracing in the consuming process); no other worker
    consumes their queues meanwhile (:func:`queues_to_myself`), so these take every message of
    the test's run."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
        "OTEL_SERVICE_NAME": NAMESPACE,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        **RECONCILER_ENV,
    }
    roles = {
        "planner": ["planner"],
        "policy": ["policy"],
        "tool": ["tool.search_public"],
        "reconciler": ["reconciler"],
    }
    workers: dict[str, WorkerProcess] = {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(queues_to_myself([q for qs in roles.values() for q in qs]))
        for role, queues in roles.items():
            proc = WorkerProcess(
                queues,
                name=f"traced-{role}",
                concurrency=1,
                pool=role_pool(role, 1),
                env=env,
                log=tmp_path / f"traced-{role}.log",
            )
            workers[role] = stack.enter_context(proc.serving())
        yield workers


def start_traced(client: Any, otlp: LocalOTLP, spec: dict[str, Any], **options: Any) -> str:
    """Start a run from this process, traced as the client (its ``run.start`` span names the
    run's trace), exporting to ``otlp``; tracing is off again on return."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=f"{otlp.endpoint}/v1/traces")
    assert telemetry.configure(service_name=telemetry.SERVICE_NAMES["client"], exporter=exporter)
    try:
        return str(client.start_run(spec, **options))
    finally:
        telemetry.shutdown()


def ledger_trace_id(engine: Any, run_id: str) -> str | None:
    with session_scope(engine) as s:
        run = s.get(Run, run_id)
        assert run is not None
        return run.trace_id


def settle_by_sweeps(client: Any, run_id: str, *, timeout: float = 60.0) -> Any:
    """Ask the reconciler for sweeps (what beat does) until the run ends."""
    end = time.monotonic() + timeout
    while True:
        info = client.get_run(run_id)
        if info.status in ("completed", "failed", "cancelled", "handoff"):
            return info
        assert time.monotonic() < end, f"run stuck: {info}"
        client.publisher.app.send_task(TASK_RECONCILE)
        client.wait(run_id, timeout=0.7, until={"completed", "failed", "cancelled", "handoff"})


@pytest.mark.slow
def test_a_run_republished_by_the_stall_sweep_is_one_trace_with_a_service_per_role(
    engine: Any, client: Any, otlp: LocalOTLP, traced_workers: dict[str, WorkerProcess]
) -> None:
    # Recorded, never published: as if the client died between its commit and its publish.
    run_spec = sc.spec([sc.search("p1"), sc.final("Three retries.", "tool-1")])
    run_id = start_traced(client, otlp, run_spec, publish=False)
    trace_id = ledger_trace_id(engine, run_id)
    assert trace_id is not None and len(trace_id) == 32
    assert client.get_run(run_id).trace_id == trace_id  # what `run show` prints

    info = settle_by_sweeps(client, run_id)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.events(engine, run_id, "run.republished")  # the sweep published it

    republish = f"apply_async/{TASK_PLANNER}"

    stages = [f"run/{t}" for t in (TASK_PLANNER, TASK_POLICY, TASK_TOOL, TASK_PLANNER)]

    def arrived() -> bool:
        """The run's spans from every role, the stages' Celery task spans (they end after
        the stage's own, so arrive in a later batch) and the sweep's re-publish."""
        names = [s.name for s in otlp.spans(run_id=run_id)]
        spans = otlp.spans()
        # in the run's trace: a stray message of an earlier test's run that these workers take
        # has task spans too, which must not stand in for this run's late ones
        tasks = [
            s.name
            for s in spans
            if s.name.startswith("run/") and s.service != RECONCILER and s.trace_id == trace_id
        ]
        # the sweep's own re-publish of *this* run (another run's stood in for a late one)
        republished = [
            s
            for s in spans
            if s.name == republish and s.service == RECONCILER and s.trace_id == trace_id
        ]
        return (
            names.count("planner.propose") == 2
            and {"run.start", "policy.evaluate", "tool.execute"} <= set(names)
            and all(tasks.count(t) >= stages.count(t) for t in stages)
            and bool(republished)
        )

    try:
        wait_for(arrived, timeout=30, what="the run's spans from every role")
    except AssertionError as exc:
        got = sorted({(s.service, s.name, s.trace_id == trace_id) for s in otlp.spans()})
        raise AssertionError(f"{exc}; got (service, name, in the run's trace): {got}") from None
    mine = otlp.spans(run_id=run_id)
    # Every span of the run — the client's start, each stage of every role — is the ledger's
    # trace; so are the stages' Celery task spans and the sweep's re-publish.
    assert {s.trace_id for s in mine} == {trace_id}
    in_trace = [s for s in otlp.spans() if s.trace_id == trace_id]
    tasks = [s.name for s in in_trace if s.name.startswith("run/")]
    assert all(tasks.count(t) >= stages.count(t) for t in stages), tasks
    # the planner's message, published by the sweep (the reconciler) and by the tool stage
    assert {s.service for s in in_trace if s.name == republish} == {RECONCILER, TOOL}
    sweeps = {s.trace_id for s in otlp.spans() if s.name == f"run/{TASK_RECONCILE}"}
    assert sweeps and trace_id not in sweeps  # a sweep is a trace of its own

    # One service name per role; OTEL_SERVICE_NAME is their namespace.
    services = {n: {s.service for s in mine if s.name == n} for n in {s.name for s in mine}}
    assert services["run.start"] == {"warrant-client"}
    assert services["planner.propose"] == {PLANNER}
    assert services["policy.evaluate"] == services["policy.parse"] == {POLICY}
    assert services["tool.execute"] == {TOOL}
    workers = [s for s in in_trace if s.service != "warrant-client"]
    assert {s.service for s in workers} == {PLANNER, POLICY, TOOL, RECONCILER}
    assert {s.resource.get("service.namespace") for s in workers} == {NAMESPACE}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli_seconds(args: list[str], env: dict[str, str], *, times: int = 2) -> float:
    """The shortest wall time of ``warrant <args>`` in ``times`` tries (each must succeed):
    the least disturbed by whatever else the machine runs."""
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "warrant.runner.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        took.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr
    return min(took)


@pytest.mark.slow
def test_an_unreachable_collector_costs_the_cli_nothing_noticeable(
    services: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(sc.spec([sc.final("Nothing to look up.")])))
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # A collector that refuses (a closed port) and one that never answers (accepts, then
    # silence: what an unroutable address or a hung collector costs a client).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        endpoints = {
            "refused": f"http://127.0.0.1:{_free_port()}",
            "silent": f"http://127.0.0.1:{silent.getsockname()[1]}",
        }
        report = []
        for args in (["run", "list"], ["run", "start", str(spec)]):  # start exports spans
            baseline = _cli_seconds(args, plain)
            for what, endpoint in endpoints.items():
                env = {**plain, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
                took = _cli_seconds(args, env)
                report.append(f"{' '.join(args[:2])} {what}: {took:.2f}s vs {baseline:.2f}s")
                assert took <= 1.5 * baseline + 1.0, report[-1]
    with capsys.disabled():
        print("\n[tracing] " + "; ".join(report))
