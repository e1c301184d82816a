"""Test hygiene: ``-m "not services"`` (``make test-fast``) never collects a service-backed test.

The ``services`` marker follows from the fixtures a test uses (``pytest_collection_modifyitems``
in tests/conftest.py); this collects the suite in a subprocess, as ``make test-fast`` does, and
inspects what was selected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests import conftest
from tests.conftest import COLLECTED_REPORT_ENV, SERVICE_FIXTURES, needs_services

ROOT = Path(__file__).resolve().parents[2]


def _collect(tmp_path: Path, *args: str) -> list[dict[str, list[str] | str]]:
    report = tmp_path / "collected.json"
    env = {**os.environ, COLLECTED_REPORT_ENV: str(report), "WARRANT_TEST_NO_EMBEDDED": "1"}
    env.pop("CI", None)  # collecting needs no services, wherever they are
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(report.read_text())


def test_not_services_collects_no_test_that_uses_a_service_fixture(tmp_path: Path) -> None:
    everything = _collect(tmp_path)
    fast = _collect(tmp_path, "-m", "not services")
    backed = {t["nodeid"] for t in everything if SERVICE_FIXTURES & set(t["fixtures"])}
    assert backed, "no service-backed test found: the check would prove nothing"
    assert all("services" in t["markers"] for t in everything if t["nodeid"] in backed)
    leaked = [t["nodeid"] for t in fast if SERVICE_FIXTURES & set(t["fixtures"])]
    assert leaked == []
    assert not [t["nodeid"] for t in fast if "services" in t["markers"]]
    # The folders agree: tests/unit holds no service-backed test (conftest refuses one there).
    assert not [
        t["nodeid"]
        for t in everything
        if t["nodeid"].startswith("tests/unit/") and "services" in t["markers"]
    ]
    assert any(t["nodeid"].startswith("tests/unit/") for t in fast)
    # Something is left for ``make test-fast``, and it is exactly the rest.
    assert {t["nodeid"] for t in fast} == {
        t["nodeid"] for t in everything if "services" not in t["markers"]
    }


def test_needs_services_reads_the_whole_fixture_closure() -> None:
    item = SimpleNamespace(fixturenames=["request", "tmp_path", "own_stack", "services"])
    assert needs_services(item)  # type: ignore[arg-type]
    assert not needs_services(SimpleNamespace(fixturenames=["tmp_path"]))  # type: ignore[arg-type]
    assert not needs_services(SimpleNamespace())  # type: ignore[arg-type]  # e.g. a doctest item


def test_the_test_time_factor_is_set_or_measured_and_bounded(monkeypatch) -> None:
    """A loaded machine makes the suite slower, not red: every wait scales by one factor."""
    monkeypatch.setenv("WARRANT_TEST_TIME_FACTOR", "2.5")
    assert conftest._time_factor() == 2.5
    monkeypatch.setenv("WARRANT_TEST_TIME_FACTOR", "0.2")  # never below an idle machine
    assert conftest._time_factor() == 1.0
    monkeypatch.delenv("WARRANT_TEST_TIME_FACTOR")
    monkeypatch.setattr(conftest.os, "getloadavg", lambda: (40.0, 0.0, 0.0))
    assert conftest._time_factor() == 3.0  # measured: the load per core, capped
    monkeypatch.setattr(conftest.os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert conftest._time_factor() == 1.0
