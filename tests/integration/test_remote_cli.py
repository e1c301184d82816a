"""The ``warrant`` CLI against a remote ``warrant serve`` (``WARRANT_SERVER_URL`` and
``WARRANT_API_TOKEN``), with no database or broker in the CLI's environment: a real
``warrant serve`` subprocess over the real stack and a real Celery worker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_gate_pipeline import memory_spec, save
from warrant.ledger.models import Confirmation
from warrant.runner.client.remote import RemoteClient
from warrant.runner.stack.supervisor import stop_with_parent

pytestmark = [pytest.mark.services, pytest.mark.slow]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``warrant serve`` on a free port (the session's database and broker)."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "warrant.runner.cli", "serve", "--port", str(port)],
            env=dict(os.environ),
            stdout=out,
            stderr=out,
            start_new_session=True,
            preexec_fn=stop_with_parent,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"warrant serve exited: {log.read_text()}"
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < end, f"warrant serve did not start: {log.read_text()}"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def tokens(engine: Any) -> dict[str, str]:
    from warrant.runner.client.tokens import Tokens

    made: dict[str, str] = {}
    suffix = uuid.uuid4().hex[:6]
    for role in ("producer", "approver", "operator"):
        token, _ = Tokens(engine).create(f"remote-{role}-{suffix}", role, created_by="tests")
        made[role] = token
        made[f"label:{role}"] = f"remote-{role}-{suffix} ({role})"
    return made


def remote(
    url: str, token: str, *args: str, tmp: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``warrant ARGS`` with only the server's URL and a token: no database, no broker."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WARRANT_DATABASE_URL", "WARRANT_BROKER_URL")
    }
    env.update(WARRANT_SERVER_URL=url, WARRANT_API_TOKEN=token, WARRANT_DATA_DIR=str(tmp))
    return subprocess.run(
        [sys.executable, "-m", "warrant.runner.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def error_code(out: subprocess.CompletedProcess[str]) -> str:
    return str(json.loads(out.stdout)["error"]["code"])


def test_a_producer_starts_waits_shows_lists_and_traces_remotely(server, tokens, worker, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")])))
    started = remote(
        server, tokens["producer"], "run", "start", str(spec), "--wait", "--json", tmp=tmp_path
    )
    assert started.returncode == 0, started.stdout + started.stderr
    info = json.loads(started.stdout)
    assert (info["status"], info["stop_reason"]) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert info["started_by"] == tokens["label:producer"]

    assert info["warnings"] == [] and info["why"]["stop_reason"] == "FINAL_ANSWER_VALIDATED"
    assert started.stderr.splitlines()[0] == f"run {info['run_id']}"  # at once, on stderr
    shown = remote(
        server, tokens["producer"], "run", "show", info["run_id"][:8], "--json", tmp=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {k: v for k, v in info.items() if k != "warnings"}
    listed = remote(server, tokens["producer"], "run", "list", "--json", tmp=tmp_path)
    assert info["run_id"] in [r["run_id"] for r in json.loads(listed.stdout)]
    trace = remote(
        server, tokens["producer"], "run", "trace", info["run_id"], "--json", tmp=tmp_path
    )
    document = json.loads(trace.stdout)
    assert document["run_id"] == info["run_id"]
    events = document["events"]
    said = [e["event"] for e in events if e["event"] != "ledger.rows_hashed"]  # the chain's
    assert said[0] == "run.created" and said[-1] == "run.stopped"
    readable = remote(server, tokens["producer"], "run", "trace", info["run_id"], tmp=tmp_path)
    assert readable.returncode == 0 and "run.stopped" in readable.stdout


def test_an_approver_confirms_remotely_under_the_tokens_identity(
    server, tokens, worker, engine, tmp_path
):
    subject = f"remote-confirm-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "spec.json"
    outputs = [sc.search("p1"), save("zh-CN"), sc.final("Saved.", "tool-1", "tool-2")]
    spec.write_text(json.dumps(memory_spec(outputs, subject)))
    producer, approver = tokens["producer"], tokens["approver"]
    started = remote(server, producer, "run", "start", str(spec), "--wait", "--json", tmp=tmp_path)
    assert started.returncode == 4, started.stdout + started.stderr  # waits for a person
    waiting = json.loads(started.stdout)
    assert waiting["status"] == "waiting_confirmation", waiting
    run_id, h = waiting["run_id"], waiting["confirmation_request"]["proposal_hash"]
    assert waiting["why"]["waiting_for"]["proposal_hash"] == h
    # re-attached through the API's long poll: the same state, the same exit code
    again = remote(
        server, producer, "run", "wait", run_id[:8], "--timeout", "5", "--json", tmp=tmp_path
    )
    assert again.returncode == 4, again.stdout + again.stderr
    assert json.loads(again.stdout)["version"] == waiting["version"]
    assert f"run {run_id}: step" in again.stderr
    confirm = ("run", "confirm", run_id, "--proposal-hash", h, "--by", "x", "--json")

    denied = remote(server, producer, *confirm, tmp=tmp_path)
    assert (denied.returncode, error_code(denied)) == (2, "FORBIDDEN")
    wrong = remote(server, approver, *confirm[:4], "0" * 64, *confirm[5:], tmp=tmp_path)
    assert (wrong.returncode, error_code(wrong)) == (2, "CONFIRMATION_HASH_MISMATCH")
    ok = remote(server, approver, *confirm, tmp=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout) == {
        "run_id": run_id,
        "decision": "approved",
        "version": waiting["version"] + 1,
        "waiting_for_more": False,
    }

    with RemoteClient(server, producer) as client:
        done = client.wait(run_id, timeout=60)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    late = ("run", "grant", run_id, "--capability", "memory:write", "--by", "x", "--json")
    refused = remote(server, tokens["operator"], *late, tmp=tmp_path)
    assert (refused.returncode, error_code(refused)) == (2, "RUN_FINISHED")  # a 409
    label = tokens["label:approver"]
    assert facts.count(engine, Confirmation, run_id=run_id, decided_by=label) == 1
    assert facts.count(engine, Confirmation, run_id=run_id, decided_by="x") == 0


def test_bad_tokens_and_an_unreachable_server_keep_the_exit_codes(server, tokens, tmp_path):
    wrong = remote(server, "wrt_not-a-token", "run", "list", "--json", tmp=tmp_path)
    assert (wrong.returncode, error_code(wrong)) == (2, "TOKEN_INVALID")
    none = remote(server, "", "run", "list", "--json", tmp=tmp_path)
    assert (none.returncode, error_code(none)) == (2, "TOKEN_INVALID")
    missing = remote(
        server, tokens["producer"], "run", "show", "no-such-run", "--json", tmp=tmp_path
    )
    assert (missing.returncode, error_code(missing)) == (2, "RUN_NOT_FOUND")
    bad = tmp_path / "bad.json"
    spec = sc.spec([])
    spec["budgets"]["max_steps"] = "many"
    bad.write_text(json.dumps(spec))
    invalid = remote(server, tokens["producer"], "run", "start", str(bad), "--json", tmp=tmp_path)
    assert (invalid.returncode, error_code(invalid)) == (2, "SPEC_INVALID")

    gone = f"http://127.0.0.1:{free_port()}"
    down = remote(gone, tokens["producer"], "run", "list", "--json", tmp=tmp_path)
    assert (down.returncode, error_code(down)) == (3, "SERVER_UNREACHABLE")
    human = remote(gone, tokens["producer"], "run", "show", "x", tmp=tmp_path)
    assert human.returncode == 3 and "SERVER_UNREACHABLE" in human.stderr


def test_database_commands_still_use_the_database_with_a_server_url(
    server, tokens, engine, tmp_path
):
    """``memory list`` has no remote equivalent: with the database in the environment it keeps
    working when WARRANT_SERVER_URL is set (make_client(remote_ok=False))."""
    env = {**os.environ, "WARRANT_SERVER_URL": server, "WARRANT_API_TOKEN": tokens["producer"]}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "warrant.runner.cli",
            "memory",
            "list",
            "--subject",
            "s",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout) == []


def test_an_approver_decides_a_parallel_steps_calls_remotely_in_one_action(
    server, tokens, worker, engine, tmp_path
):
    """``run decide`` over HTTP (``POST /v1/runs/{id}/decisions``): a producer's token may
    not; an approver's approves one call and declines the other in one request."""
    subject = f"remote-decide-{uuid.uuid4().hex[:8]}"
    fan = {
        "kind": "parallel",
        "proposal_id": "two-saves",
        "calls": [save("zh-CN", pid="s1"), save("fr-FR", pid="s2")],
        "merge": "any",
    }
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(memory_spec([fan, sc.final("Saved.", "tool-1.1")], subject)))
    producer, approver = tokens["producer"], tokens["approver"]
    started = remote(server, producer, "run", "start", str(spec), "--wait", "--json", tmp=tmp_path)
    waiting = json.loads(started.stdout)
    assert waiting["status"] == "waiting_confirmation", waiting
    run_id = waiting["run_id"]
    first, second = (
        c["proposal_hash"] for c in waiting["confirmation_request"]["parallel"]["calls"]
    )
    decide = (
        "run",
        "decide",
        run_id,
        "--approve",
        first,
        "--decline",
        second,
        "--by",
        "x",
        "--json",
    )

    denied = remote(server, producer, *decide, tmp=tmp_path)
    assert (denied.returncode, error_code(denied)) == (2, "FORBIDDEN")
    ok = remote(server, approver, *decide, tmp=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["waiting_for"] == []
    with RemoteClient(server, producer) as client:
        done = client.wait(run_id, timeout=60)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    label = tokens["label:approver"]
    assert facts.count(engine, Confirmation, run_id=run_id, decided_by=label) == 2
    assert facts.count(engine, Confirmation, run_id=run_id, approved=True) == 1


def test_the_kill_switch_over_the_cli_remotely_an_operators_act(server, tokens, client, tmp_path):
    denied = remote(server, tokens["producer"], "tools", "disable", "pay_switched", "--json",
                    tmp=tmp_path)  # fmt: skip
    assert (denied.returncode, error_code(denied)) == (2, "FORBIDDEN")
    out = remote(server, tokens["operator"], "tools", "disable", "pay_switched",
                 "--reason", "remote test", "--json", tmp=tmp_path)  # fmt: skip
    try:
        assert out.returncode == 0, out.stderr
        disabled = json.loads(out.stdout)
        assert {k: disabled[k] for k in ("tool", "disabled", "event", "by", "reason")} == {
            "tool": "pay_switched",
            "disabled": True,
            "event": "tool.disabled",
            "by": tokens["label:operator"],  # the token's identity, not a --by
            "reason": "remote test",
        }
    finally:
        back = remote(server, tokens["operator"], "tools", "enable", "pay_switched", "--json",
                      tmp=tmp_path)  # fmt: skip
    assert back.returncode == 0, back.stderr
    assert (json.loads(back.stdout)["event"], json.loads(back.stdout)["disabled"]) == (
        "tool.enabled",
        False,
    )
