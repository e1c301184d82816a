"""The multi-host fault suite's short version (``make chaos-hosts`` runs every scenario):
hosts in network namespaces, a tool host cut off and one killed while writes are in flight,
two tool hosts with one host name; nothing lost, duplicated, unexpected or left unsettled, no
spurious handoff, no attempt outliving its lease."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.hosts import lab_problem

pytestmark = [pytest.mark.slow]


def test_short_multi_host_fault_suite_finds_nothing() -> None:
    problem = lab_problem()
    if problem:
        if IN_CI:
            pytest.fail(f"CI=true and no multi-host lab can be made: {problem}")
        pytest.skip(problem)
    done = subprocess.run(
        [sys.executable, "-m", "bench.chaos_hosts", "--short", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout)
    rows = {row["scenario"]: row for row in report["scenarios"]}
    assert set(rows) == {"tool-host-cut-5s", "tool-host-killed", "two-hosts-one-hostname"}
    counted = ("lost", "duplicated", "unexpected", "unresolved", "spurious_handoffs", "failed")
    for name, row in rows.items():
        assert all(row[k] == 0 for k in counted), (name, row)
        assert (row["unsettled"], row["outlived_lease"]) == (0, 0), (name, row)
        assert row["completed"] == row["runs"] and row["write_in_flight"], (name, row)
    assert report["ok"] and done.returncode == 0
