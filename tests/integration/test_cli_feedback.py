"""What the ``warrant`` CLI tells its user while and after a run moves: the run id at once, a
progress line per change, exit codes by how the run ended, why it stopped, and one error path
(``--json``) for every refusal — a real CLI subprocess against the real services and worker."""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_cli import warrant
from tests.integration.test_gate_pipeline import memory_spec, save
from warrant.ledger.models import GrantRow, PreApproval

UNKNOWN_TOOL = {
    "kind": "tool",
    "proposal_id": "p2",
    "tool": "no_such_tool",
    "tool_version": "1",
    "arguments": {},
    "reason_summary": "a tool nobody deployed",
    "source_observation_ids": [],
}


def slow_spec(steps: int = 2, ms: int = 1500) -> dict[str, Any]:
    """A run of ``steps`` tool calls that sleep ``ms`` each: it cannot end before they did."""
    return sc.read_steps(steps, tool="sleep_read", ms=ms)


def spec_file(tmp_path: Path, spec: dict[str, Any], name: str = "spec.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(spec))
    return str(path)


def error(out: subprocess.CompletedProcess[str]) -> tuple[int, str]:
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, str(json.loads(out.stdout)["error"]["code"])


class Streamed:
    """A CLI subprocess whose stdout (or stderr) lines are read as they come: a thread moves
    them into a queue, so a test can wait for one with a deadline."""

    def __init__(self, *args: str, read: str = "stdout") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "warrant.runner.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        self.read = read
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        stream = self.proc.stdout if self.read == "stdout" else self.proc.stderr
        assert stream is not None
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)

    def next_line(self, *, timeout: float = 30.0) -> str:
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"the CLI ended early: {self.finish()}"
        return line

    def finish(self, *, timeout: float = 90.0) -> tuple[int, list[str], str]:
        """Exit code, the rest of the streamed lines, the other stream's whole text."""
        try:
            code = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        self.thread.join(10)
        rest: list[str] = []
        while (line := self.lines.get(timeout=5)) is not None:
            rest.append(line)
        other = self.proc.stderr if self.read == "stdout" else self.proc.stdout
        text = other.read() if other is not None else ""
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code, rest, text


def progress_lines(lines: list[str], run_id: str) -> list[str]:
    return [line.rstrip("\n") for line in lines if line.startswith(f"run {run_id}: step")]


# --- the run id at once, a progress line per change, exit codes ------------------------------


@pytest.mark.slow
def test_start_wait_prints_the_id_before_the_run_ends_then_progress(tmp_path, client, worker):
    cli = Streamed("run", "start", spec_file(tmp_path, slow_spec()), "--wait")
    first = cli.next_line()
    assert first.startswith("started "), first
    run_id = first.split()[1]
    assert cli.proc.poll() is None  # the CLI still waits ...
    assert client.get_run(run_id).status == "running"  # ... for a run that has not ended
    code, rest, stderr = cli.finish()
    assert code == 0, stderr
    progress = progress_lines(rest, run_id)
    assert len(progress) >= 2 and "completed/idle" in progress[-1], rest
    assert all(a != b for a, b in itertools.pairwise(progress)), "one line per change"
    assert any(line.startswith("why: completed: FINAL_ANSWER_VALIDATED") for line in rest)


@pytest.mark.slow
def test_start_wait_json_keeps_stdout_one_document(tmp_path, client, worker):
    cli = Streamed(
        "run", "start", spec_file(tmp_path, slow_spec()), "--wait", "--json", read="stderr"
    )
    first = cli.next_line()
    assert first.startswith("run "), first
    run_id = first.split()[1].rstrip()
    assert cli.proc.poll() is None and client.get_run(run_id).status == "running"
    code, rest, stdout = cli.finish()
    assert code == 0
    result = json.loads(stdout)  # the whole of stdout: one JSON document
    assert (result["run_id"], result["status"]) == (run_id, "completed")
    assert result["warnings"] == [] and result["why"]["stop_reason"] == "FINAL_ANSWER_VALIDATED"
    assert progress_lines(rest, run_id), rest  # the progress went to stderr


@pytest.mark.slow
def test_a_failed_run_exits_1_and_says_the_refusal_behind_it(tmp_path, worker, engine):
    spec = sc.spec([sc.search("p1"), UNKNOWN_TOOL, sc.final("x", "tool-2")], max_refused_finals=0)
    out = warrant("run", "start", spec_file(tmp_path, spec), "--wait", "--json")
    assert out.returncode == 1, out.stderr
    result = json.loads(out.stdout)
    assert (result["status"], result["stop_reason"]) == (
        "failed",
        "FINAL_CITATION_VALIDATION_FAILED",
    )
    # the start warned that the plan names a tool the registry lacks, and started anyway
    assert len(result["warnings"]) == 1 and "no_such_tool@1" in result["warnings"][0]
    assert "no_such_tool@1" in out.stderr and "UNKNOWN_TOOL_OR_VERSION" in out.stderr
    refusal = result["why"]["last_refusal"]
    assert (refusal["code"], refusal["event"]) == ("UNKNOWN_TOOL_OR_VERSION", "proposal.rejected")
    assert facts.rejection_codes(engine, result["run_id"]) == ["UNKNOWN_TOOL_OR_VERSION"]

    shown = warrant("run", "show", result["run_id"], "--json")
    assert json.loads(shown.stdout)["why"] == result["why"]
    human = warrant("run", "show", result["run_id"])
    lines = human.stdout.splitlines()
    assert lines[0] == "why: failed: FINAL_CITATION_VALIDATION_FAILED", human.stdout
    assert "last refusal: UNKNOWN_TOOL_OR_VERSION" in lines[1]
    assert "no_such_tool@1" in lines[1]


@pytest.mark.slow
def test_a_run_waiting_for_confirmation_exits_4_and_says_what_it_waits_for(tmp_path, worker):
    subject = f"feedback-{uuid.uuid4().hex[:8]}"
    spec = memory_spec([sc.search("p1"), save("zh-CN"), sc.final("Saved.", "tool-1")], subject)
    out = warrant("run", "start", spec_file(tmp_path, spec), "--wait", "--json")
    assert out.returncode == 4, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "waiting_confirmation"
    waits = result["why"]["waiting_for"]
    assert (waits["kind"], waits["tool"]) == ("confirmation", "save_preference")
    assert waits["proposal_hash"] == result["confirmation_request"]["proposal_hash"]

    # re-attached later: the same answer, the same exit code
    again = warrant("run", "wait", result["run_id"][:8], "--timeout", "10", "--json")
    assert again.returncode == 4, again.stderr
    assert json.loads(again.stdout)["version"] == result["version"]
    human = warrant("run", "show", result["run_id"])
    assert "waits for a person to confirm save_preference" in human.stdout


@pytest.mark.slow
def test_a_wait_that_times_out_exits_5_and_run_wait_reattaches(tmp_path, client, worker):
    path = spec_file(tmp_path, slow_spec(steps=2, ms=2000))
    out = warrant("run", "start", path, "--wait", "--timeout", "0.5", "--json")
    assert out.returncode == 5, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "running"
    run_id = result["run_id"]

    attached = warrant("run", "wait", run_id, "--timeout", "60")
    assert attached.returncode == 0, attached.stdout + attached.stderr
    assert "completed/idle" in attached.stdout
    assert client.get_run(run_id).status == "completed"


@pytest.mark.slow
def test_ctrl_c_stops_the_wait_not_the_run(tmp_path, client, worker):
    run_id = client.start_run(slow_spec(steps=2, ms=2000))
    cli = Streamed("run", "wait", run_id)
    assert cli.next_line().startswith(f"run {run_id}: step")
    cli.proc.send_signal(signal.SIGINT)
    code, _, stderr = cli.finish()
    assert code == 130
    assert f"warrant run wait {run_id}" in stderr and "Traceback" not in stderr
    assert client.wait(run_id, timeout=30).status == "completed"


# --- one error path: usage, settings, filters ------------------------------------------------


def test_usage_errors_take_the_json_error_path():
    assert error(warrant("run", "start", "--bogus", "--json")) == (2, "USAGE_ERROR")
    assert error(warrant("run", "show", "--json")) == (2, "USAGE_ERROR")
    assert error(warrant("run", "list", "--limit", "0", "--json")) == (2, "USAGE_ERROR")
    human = warrant("run", "start", "--bogus")
    assert human.returncode == 2 and "No such option" in human.stderr
    assert "Traceback" not in human.stderr


def test_a_spec_file_is_refused_as_the_api_refuses_its_body(tmp_path: Path):
    """One code per condition on both edges: a spec that is not JSON is SPEC_INVALID (the API
    said REQUEST_INVALID), one over 1,000,000 bytes REQUEST_TOO_LARGE (the CLI took 3 MB)."""
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert error(warrant("run", "start", str(broken), "--json")) == (2, "SPEC_INVALID")
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**sc.spec([sc.final("x", "user-1")]), "goal": "x" * 1_000_001}))
    assert error(warrant("run", "start", str(big), "--json")) == (2, "REQUEST_TOO_LARGE")


def test_an_unreachable_ledger_is_database_unavailable_as_in_the_api(tmp_path: Path):
    """It was the generic SERVICE_UNAVAILABLE with the driver's words only."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(sc.spec([sc.final("x", "user-1")])))
    closed = {"WARRANT_DATABASE_URL": "postgresql://postgres@127.0.0.1:9/nowhere"}
    out = warrant("run", "start", str(spec), "--wait", "--json", env=closed)
    assert error(out)[1] == "DATABASE_UNAVAILABLE", out.stdout + out.stderr
    assert "cannot reach the ledger database" in json.loads(out.stdout)["error"]["message"]


def test_a_misspelt_capability_is_warned_of_at_start(tmp_path: Path):
    """A grant of ``search:pubilc`` used to be accepted silently and surface mid-run as
    MISSING_CAPABILITY."""
    spec = tmp_path / "spec.json"
    typo = [{"capability": "search:pubilc", "resource_scope": "public"}]
    spec.write_text(json.dumps(sc.spec([sc.final("x", "user-1")], grants=typo)))
    out = warrant("run", "start", str(spec), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    [said] = json.loads(out.stdout)["warnings"]
    assert "'search:pubilc'" in said and "did you mean 'search:public'?" in said


def test_bad_settings_take_the_json_error_path():
    out = warrant("run", "list", "--json", env={"WARRANT_DATABASE_URL": "not a url"})
    assert error(out) == (2, "SETTINGS_INVALID")
    assert "WARRANT_DATABASE_URL" in json.loads(out.stdout)["error"]["message"]
    out = warrant("run", "list", "--json", env={"WARRANT_STALL_AFTER_S": "soon"})
    assert error(out) == (2, "SETTINGS_INVALID")
    assert "WARRANT_STALL_AFTER_S" in json.loads(out.stdout)["error"]["message"]
    human = warrant("run", "list", env={"WARRANT_STALL_AFTER_S": "soon"})
    assert human.returncode == 2 and "Traceback" not in human.stderr
    assert "SETTINGS_INVALID" in human.stderr


def test_version():
    from importlib.metadata import version

    out = warrant("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"warrant {version('warrant-runner')}"


def test_a_bad_status_filter_names_the_valid_values():
    out = warrant("run", "list", "--status", "bogus", "--json")
    assert error(out) == (2, "STATUS_INVALID")
    assert {"running", "completed", "waiting_confirmation"} <= set(
        json.loads(out.stdout)["error"]["valid"]
    )
    human = warrant("run", "list", "--status", "bogus")
    assert human.returncode == 2 and "waiting_confirmation" in human.stderr


# --- ids: whole in tables, unique prefixes accepted ------------------------------------------


def _runs_sharing_a_prefix(client: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Two runs whose ids share their first 9 characters (and differ in the 10th)."""
    prefix = uuid.uuid4().hex[:8]
    made = iter([uuid.UUID(f"{prefix}-{n}000-4000-8000-000000000000") for n in (1, 2)])
    real = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: next(made, None) or real())
    ids = tuple(client.start_run(sc.spec([sc.final("x")]), publish=False) for _ in range(2))
    monkeypatch.setattr(uuid, "uuid4", real)
    assert all(i.startswith(prefix) for i in ids), ids
    return ids[0], ids[1]


def test_run_ids_are_whole_in_tables_and_prefixes_resolve(client, monkeypatch):
    first, second = _runs_sharing_a_prefix(client, monkeypatch)
    try:
        listed = warrant("run", "list", "--limit", "5")
        assert first in listed.stdout and second in listed.stdout, listed.stdout

        out = warrant("run", "show", first[:8], "--json")
        assert error(out) == (2, "ID_AMBIGUOUS")
        assert set(json.loads(out.stdout)["error"]["matches"]) == {first, second}
        shown = warrant("run", "show", first[:10], "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == first
        assert error(warrant("run", "show", first[:5], "--json")) == (2, "RUN_NOT_FOUND")
        assert error(warrant("run", "show", "ffffffff-none", "--json")) == (2, "RUN_NOT_FOUND")
        trace = warrant("run", "trace", second[:10], "--json")
        assert json.loads(trace.stdout)["events"][0]["event"] == "run.created"
    finally:
        for run_id in (first, second):
            client.cancel(run_id, by="tests", revoke=False)


def test_handoff_ids_are_whole_in_tables_and_prefixes_resolve(client, engine):
    from warrant.ledger.db import session_scope
    from warrant.ledger.models import Handoff

    run_id = client.start_run(sc.spec([sc.final("x")]), publish=False)
    handoff_id = str(uuid.uuid4())
    with session_scope(engine) as s:  # a handoff row as the reconciler writes one
        s.add(Handoff(id=handoff_id, run_id=run_id, reason="UNKNOWN_EFFECT", bundle={}))
    try:
        listed = warrant("handoff", "list")
        assert handoff_id in listed.stdout and run_id in listed.stdout, listed.stdout
        shown = warrant("handoff", "show", handoff_id[:8], "--json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert json.loads(shown.stdout)["handoff_id"] == handoff_id
        by_run = warrant("handoff", "show", run_id[:8], "--json")
        assert json.loads(by_run.stdout)["handoff_id"] == handoff_id
        missing = warrant("handoff", "show", "ffffffff-none", "--json")
        assert error(missing) == (2, "HANDOFF_NOT_FOUND")
    finally:
        client.cancel(run_id, by="tests", revoke=False)


# --- finished runs take no grants ------------------------------------------------------------


@pytest.mark.slow
def test_grants_and_pre_approvals_on_a_finished_run_are_refused(tmp_path, client, worker, engine):
    run_id = client.start_run(sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")]))
    assert client.wait(run_id, timeout=30).status == "completed"
    grants = facts.count(engine, GrantRow, run_id=run_id)

    grant = warrant("run", "grant", run_id[:8], "--capability", "search:public", "--by", "ops")
    assert grant.returncode == 2 and "RUN_FINISHED" in grant.stderr
    grant = warrant(
        "run", "grant", run_id, "--capability", "search:public", "--by", "ops", "--json"
    )
    assert error(grant) == (2, "RUN_FINISHED")
    arguments = json.dumps({"query": "x"})
    pre = warrant(
        "run",
        "pre-approve",
        run_id,
        "--tool",
        "search_public",
        "--tool-version",
        "1",
        "--arguments",
        arguments,
        "--by",
        "ops",
        "--json",
    )
    assert error(pre) == (2, "RUN_FINISHED")
    cancel = warrant("run", "cancel", run_id, "--by", "ops", "--json")
    assert error(cancel) == (2, "RUN_NOT_CANCELLABLE")
    assert facts.count(engine, GrantRow, run_id=run_id) == grants
    assert facts.count(engine, PreApproval, run_id=run_id) == 0
    assert not facts.events(engine, run_id, "grant.added")


def test_start_warns_from_the_policy_workers_registrations_not_its_own_registry(
    tmp_path, worker, engine
):
    """The CLI's environment lacks the typed plug-in; the policy worker has it (its
    registration says so): no warning for ``typed_echo@1``, one for a tool nobody has."""
    typed = {
        **UNKNOWN_TOOL,
        "proposal_id": "p1",
        "tool": "typed_echo",
        "arguments": {"n": 1, "amount": "1.5"},
    }
    spec = sc.spec([typed, UNKNOWN_TOOL, sc.final("x", "tool-1")])
    own = {"WARRANT_TOOLS": "warrant_demo:plugin"}  # no tests.typed_tool:plugin here
    out = warrant("run", "start", spec_file(tmp_path, spec), "--json", env=own)
    assert out.returncode == 0, out.stderr
    warnings = json.loads(out.stdout)["warnings"]
    assert len(warnings) == 1, warnings
    assert "no_such_tool@1" in warnings[0] and "policy workers" in warnings[0]
