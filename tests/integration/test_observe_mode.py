"""Observe mode over the real pipeline: a policy worker with ``WARRANT_OBSERVE_TOOLS`` lets a
call without a grant through and traces it; the report, ``run show`` and ``/metrics`` count
it; without observe mode (and for any invalid proposal, with it) the gate refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import WorkerProcess
from tests.integration.test_cli import warrant
from tests.integration.test_metrics import _samples
from tests.integration.test_tracing import queues_to_myself
from warrant.runner.observe import WOULD_REFUSE
from warrant.runner.server.metrics import metrics_response

pytestmark = [pytest.mark.services, pytest.mark.slow]

OBSERVED = "search_public"
METRIC = ("warrant_gate_would_refuse_total", (("code", "MISSING_CAPABILITY"), ("tool", OBSERVED)))


def no_grant_search() -> dict[str, Any]:
    return sc.spec([sc.search("p1"), sc.final("Three retries.", "tool-1")], grants=[])


@pytest.fixture
def observing_policy(services: Any, worker: WorkerProcess, tmp_path: Path) -> Iterator[Path]:
    """The only policy worker while the test runs, observing ``search_public``; its log."""
    log = tmp_path / "observer.log"
    with queues_to_myself(["policy"]):
        env = {"WARRANT_OBSERVE_TOOLS": OBSERVED}
        proc = WorkerProcess(
            ["policy"], name="observer", pool="solo", concurrency=1, env=env, log=log
        )
        with proc.serving():
            yield log


def test_an_observed_call_without_a_grant_runs_traced_and_reported(
    engine, client, observing_policy
):
    before = _samples(metrics_response(engine)[0]).get(METRIC, 0)
    info = client.wait(client.start_run(no_grant_search()), timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.commands(engine, info.run_id) == 1 and facts.outcomes(engine, info.run_id) == 1
    assert facts.rejection_codes(engine, info.run_id) == []
    seen = facts.events(engine, info.run_id, WOULD_REFUSE)
    assert [(e.details["code"], e.details["layer"], e.details["tool"]) for e in seen] == [
        ("MISSING_CAPABILITY", "authorization", OBSERVED)
    ]
    assert "OBSERVE MODE" in observing_policy.read_text()  # loud at start

    report = warrant("gate", "report", "--run", info.run_id[:8], "--since", "1h", "--json")
    assert report.returncode == 0, report.stderr
    summary = json.loads(report.stdout)
    assert summary["total"] == 1 and summary["run_id"] == info.run_id
    (group,) = summary["groups"]
    assert {k: group[k] for k in ("code", "tool", "layer", "count", "runs", "example_runs")} == {
        "code": "MISSING_CAPABILITY",
        "tool": OBSERVED,
        "layer": "authorization",
        "count": 1,
        "runs": 1,
        "example_runs": [info.run_id],
    }
    later = warrant("gate", "report", "--run", info.run_id, "--since", "2999-01-01", "--json")
    assert json.loads(later.stdout)["total"] == 0
    shown = json.loads(warrant("run", "show", info.run_id, "--json").stdout)
    assert [w["code"] for w in shown["would_refuse"]] == ["MISSING_CAPABILITY"]
    assert shown["why"].get("last_refusal") is None
    assert _samples(metrics_response(engine)[0])[METRIC] == before + 1


def test_observe_mode_is_per_tool_and_never_lets_an_invalid_proposal_through(
    engine, client, observing_policy
):
    invalid = sc.spec([{**sc.search("p1"), "arguments": {"query": 7}}], grants=[])
    unobserved = sc.spec([tool_call("save_preference", {"key": "answer_language", "value": "zh"})])
    for spec, code in ((invalid, "INVALID_QUERY"), (unobserved, "MISSING_CAPABILITY")):
        info = client.wait(client.start_run(spec), timeout=30)
        assert facts.rejection_codes(engine, info.run_id) == [code]
        assert facts.commands(engine, info.run_id) == 0
        assert facts.events(engine, info.run_id, WOULD_REFUSE) == []


def test_without_observe_mode_the_same_run_is_refused(engine, run_to_end):
    info = run_to_end(no_grant_search())
    assert facts.rejection_codes(engine, info.run_id) == ["MISSING_CAPABILITY"]
    assert facts.commands(engine, info.run_id) == 0
    assert facts.events(engine, info.run_id, WOULD_REFUSE) == []


def test_the_report_refuses_a_bad_date_with_its_code(services):
    bad = warrant("gate", "report", "--since", "yesterday-ish", "--json")
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["error"]["code"] == "INVALID_DATE"


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {**sc.search("p1"), "tool": name, "arguments": arguments}
