"""``warrant serve``: the HTTP API on a real uvicorn server over the real stack (PostgreSQL,
Redis, a Celery worker), spoken to with plain HTTP (httpx)."""

from __future__ import annotations

import itertools
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import wait_for
from tests.integration.test_gate_pipeline import memory_spec, save
from tests.integration.test_tool_execution import LOOKUP, lookup
from warrant.ledger.models import Confirmation, MemoryRecord, Run
from warrant.runner.authz import Action, Role, allowed

pytestmark = [pytest.mark.services]

ROLES = [r.value for r in Role]


class LiveServer:
    """The app under uvicorn in a thread, on a socket bound to a free port."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", ws="none", timeout_graceful_shutdown=3
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> LiveServer:
        self.thread.start()
        end = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < end and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture(scope="module")
def app(client: Any) -> Any:
    from warrant.runner.server.http import create_app

    return create_app(client=client)


@pytest.fixture(scope="module")
def api(app: Any) -> Iterator[str]:
    with LiveServer(app) as server:
        yield server.url


@pytest.fixture(scope="module")
def tokens(engine: Any) -> dict[str, str]:
    """One token per role (names unique to this session), and ``label:<role>`` its label."""
    from warrant.runner.client.tokens import Tokens

    made: dict[str, str] = {}
    suffix = uuid.uuid4().hex[:6]
    for role in ROLES:
        token, _ = Tokens(engine).create(f"http-{role}-{suffix}", role, created_by="tests")
        made[role] = token
        made[f"label:{role}"] = f"http-{role}-{suffix} ({role})"
    return made


def call(api: str, token: str | None, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = dict(kw.pop("headers", {}))
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.request(method, api + path, headers=headers, timeout=90, **kw)


def wait_until(api: str, token: str, run_id: str, statuses: set[str], *, limit: float = 60):
    """Long-poll /wait from the version last seen until the run reaches one of ``statuses``."""
    version, end = 0, time.monotonic() + limit
    while time.monotonic() < end:
        r = call(api, token, "GET", f"/v1/runs/{run_id}/wait", params={"version": version})
        assert r.status_code == 200, r.text
        info = r.json()
        if info["status"] in statuses:
            return info
        assert info["version"] != version or r.headers["Warrant-Wait"] == "timeout"
        version = info["version"]
    raise AssertionError(f"run {run_id} did not reach {statuses}")


def error(r: httpx.Response) -> str:
    body = r.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), body
    return str(body["error"]["code"])


# --- the producer and the approver, in plain HTTP --------------------------------------------


@pytest.mark.slow
def test_a_producer_starts_waits_and_reads_a_run(api, tokens, worker):
    subject = f"http-flow-{uuid.uuid4().hex[:8]}"
    spec = sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")])
    spec["subject"] = subject
    r = call(api, tokens["producer"], "POST", "/v1/runs", json=spec)
    assert r.status_code == 201, r.text
    run = r.json()
    assert (run["status"], run["started_by"]) == ("running", tokens["label:producer"])

    done = wait_until(api, tokens["producer"], run["run_id"], {"completed", "failed"})
    assert (done["status"], done["answer"]) == ("completed", "Three.")
    trace = call(api, tokens["viewer"], "GET", f"/v1/runs/{run['run_id']}/trace").json()
    events = [e["event"] for e in trace["events"]]
    assert events[0] == "run.created" and "command.issued" in events
    view = call(api, tokens["viewer"], "GET", f"/v1/runs/{run['run_id']}/view")
    assert view.status_code == 200 and view.json()["goal"]["content"] == spec["goal"]
    listed = call(api, tokens["viewer"], "GET", "/v1/runs", params={"subject": subject})
    assert [x["run_id"] for x in listed.json()["runs"]] == [run["run_id"]]
    for tool, found in (("search_public", 1), ("write_artifact", 0)):
        page = call(
            api, tokens["viewer"], "GET", "/v1/runs", params={"subject": subject, "tool": tool}
        )
        assert len(page.json()["runs"]) == found


@pytest.mark.slow
def test_an_approver_confirms_by_hash_and_the_run_completes(api, tokens, engine, worker):
    subject = f"http-confirm-{uuid.uuid4().hex[:8]}"
    spec = memory_spec(
        [sc.search("p1"), save("zh-CN"), sc.final("Saved.", "tool-1", "tool-2")], subject
    )
    run_id = call(api, tokens["producer"], "POST", "/v1/runs", json=spec).json()["run_id"]
    waiting = wait_until(api, tokens["approver"], run_id, {"waiting_confirmation", "failed"})
    assert waiting["status"] == "waiting_confirmation", waiting
    h = waiting["confirmation_request"]["proposal_hash"]

    path = f"/v1/runs/{run_id}/confirm"
    wrong = call(api, tokens["approver"], "POST", path, json={"proposal_hash": "0" * 64})
    assert (wrong.status_code, error(wrong)) == (409, "CONFIRMATION_HASH_MISMATCH")
    producer = call(api, tokens["producer"], "POST", path, json={"proposal_hash": h})
    assert (producer.status_code, error(producer)) == (403, "FORBIDDEN")
    body = {"proposal_hash": h, "by": "somebody else"}  # `by` is never taken from a body
    assert call(api, tokens["approver"], "POST", path, json=body).status_code == 422
    ok = call(api, tokens["approver"], "POST", path, json={"proposal_hash": h})
    assert ok.status_code == 200, ok.text
    assert ok.json() == {
        "run_id": run_id,
        "decision": "approved",
        "version": waiting["version"] + 1,
        "waiting_for_more": False,
    }

    done = wait_until(api, tokens["producer"], run_id, {"completed", "failed"})
    assert (done["status"], done["stop_reason"]) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert (
        facts.count(engine, Confirmation, run_id=run_id, decided_by=tokens["label:approver"]) == 1
    )

    # The operator revokes the memory record the confirmed proposal wrote.
    record = _memory_record(engine, subject)
    r = call(api, tokens["approver"], "DELETE", f"/v1/memory/{record}")
    assert (r.status_code, error(r)) == (403, "FORBIDDEN")
    r = call(api, tokens["operator"], "DELETE", f"/v1/memory/{record}")
    assert r.status_code == 200 and r.json()["revoked_by"] == tokens["label:operator"]
    [revoked] = facts.events(engine, run_id, "memory.revoked")  # traced on the writing run
    assert revoked.details == {
        "record_id": record,
        "key": "answer_language",
        "by": tokens["label:operator"],
    }


def _memory_record(engine: Any, subject: str) -> int:
    from sqlalchemy import select

    from warrant.ledger.db import session_scope

    with session_scope(engine) as s:
        return int(s.scalar(select(MemoryRecord.id).where(MemoryRecord.subject == subject)))


def test_operator_actions_record_the_token_label(api, tokens, client, engine):
    run_id = client.start_run(
        sc.spec([sc.search("p1")]), publish=False, started_by=tokens["label:producer"]
    )
    base = f"/v1/runs/{run_id}"
    grant = {"capability": "artifact:write", "resource_scope": "run-output/*", "max_uses": 1}
    r = call(api, tokens["operator"], "POST", f"{base}/grants", json=grant)
    assert r.status_code == 201, r.text
    pre = {"tool": "search_public", "tool_version": "1", "arguments": {"query": "x"}}
    r = call(api, tokens["operator"], "POST", f"{base}/pre-approvals", json=pre)
    assert r.status_code == 201, r.text
    r = call(api, tokens["producer"], "POST", f"{base}/cancel", json={"reason": "not needed"})
    assert (r.status_code, r.json()["status"]) == (200, "cancelled")
    by = {e.event: e.details["by"] for e in facts.events(engine, run_id) if "by" in e.details}
    assert by["grant.added"] == tokens["label:operator"]
    assert by["pre_approval.added"] == tokens["label:operator"]
    [pre_row] = client.get_run(run_id).pre_approvals
    assert pre_row["approved_by"] == tokens["label:operator"]
    assert by["cancel.requested"] == tokens["label:producer"]


def test_a_producer_cancels_only_its_own_runs(api, tokens, client):
    """Started by someone else (or by an administrator on the database): 403 NOT_YOUR_RUN; an
    operator may cancel it."""
    run_id = client.start_run(sc.spec([sc.search("p1")]), publish=False, started_by="someone")
    r = call(api, tokens["producer"], "POST", f"/v1/runs/{run_id}/cancel", json={})
    assert (r.status_code, error(r)) == (403, "NOT_YOUR_RUN")
    assert client.get_run(run_id).status == "running"
    r = call(api, tokens["operator"], "POST", f"/v1/runs/{run_id}/cancel", json={})
    assert (r.status_code, r.json()["status"]) == (200, "cancelled")


# --- idempotency -----------------------------------------------------------------------------


def test_an_idempotency_key_returns_the_same_run(api, tokens, engine):
    key = f"order-{uuid.uuid4()}"
    spec = sc.spec([CLARIFY_ONLY])
    headers = {"Idempotency-Key": key}
    first = call(api, tokens["producer"], "POST", "/v1/runs", json=spec, headers=headers)
    again = call(api, tokens["operator"], "POST", "/v1/runs", json=spec, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200), (first.text, again.text)
    assert first.json()["run_id"] == again.json()["run_id"]
    assert again.json()["idempotency_key"] == key
    assert facts.count(engine, Run, idempotency_key=key) == 1
    other = dict(spec, goal="Another goal.")
    r = call(api, tokens["producer"], "POST", "/v1/runs", json=other, headers=headers)
    assert (r.status_code, error(r)) == (409, "IDEMPOTENCY_KEY_REUSED")
    assert facts.count(engine, Run, idempotency_key=key) == 1


CLARIFY_ONLY = {"kind": "clarify", "question": "Which one?"}


def test_a_proposals_idempotency_key_returns_the_same_decision(api, tokens, engine, worker):
    spec = dict(sc.spec([], grants=[LOOKUP]), planner={"kind": "external", "agent": "t"})
    token = tokens["producer"]
    run_id = call(api, token, "POST", "/v1/runs", json=spec).json()["run_id"]
    key = {"Idempotency-Key": f"call-{uuid.uuid4().hex}"}
    path = f"/v1/runs/{run_id}/proposals"
    body = {"proposal": lookup("order 1", pid="a")}
    first = call(api, token, "POST", path, json=body, headers=key)
    again = call(
        api, token, "POST", path, json={"proposal": lookup("order 1", pid="b")}, headers=key
    )
    assert (first.status_code, again.status_code) == (200, 200), (first.text, again.text)
    assert first.json()["step"] == again.json()["step"] == 1
    other = call(api, token, "POST", path, json={"proposal": lookup("order 2")}, headers=key)
    assert (other.status_code, error(other)) == (409, "IDEMPOTENCY_KEY_REUSED")
    assert facts.proposals(engine, run_id) == 1


# --- listing and long polls ------------------------------------------------------------------


def test_runs_are_listed_newest_first_a_page_at_a_time(api, tokens, client):
    subject = f"http-list-{uuid.uuid4().hex[:8]}"
    spec = dict(sc.spec([CLARIFY_ONLY]), subject=subject)
    started = [client.start_run(spec, publish=False) for _ in range(5)]
    client.cancel(started[1], by="tests", revoke=False)
    seen, cursor, pages = [], None, 0
    while True:
        params = {"subject": subject, "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = call(api, tokens["viewer"], "GET", "/v1/runs", params=params).json()
        seen += [r["run_id"] for r in page["runs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(started)) and pages == 3
    created = [client.get_run(i).created_at for i in seen]
    assert created == sorted(created, reverse=True)
    params = {"subject": subject, "status": "cancelled"}
    only = call(api, tokens["viewer"], "GET", "/v1/runs", params=params).json()["runs"]
    assert [r["run_id"] for r in only] == [started[1]]
    since = {"subject": subject, "created_since": client.get_run(started[3]).created_at}
    newer = call(api, tokens["viewer"], "GET", "/v1/runs", params=since).json()["runs"]
    assert [r["run_id"] for r in newer] == [started[4], started[3]]
    future = {"subject": subject, "created_since": "2999-01-01T00:00:00"}
    assert call(api, tokens["viewer"], "GET", "/v1/runs", params=future).json()["runs"] == []


def test_a_long_poll_returns_at_the_change_settled_or_timeout(api, tokens, client):
    run_id = client.start_run(sc.spec([CLARIFY_ONLY]), publish=False)
    path, viewer = f"/v1/runs/{run_id}/wait", tokens["viewer"]
    t0 = time.monotonic()
    r = call(api, viewer, "GET", path, params={"version": 1, "timeout": 0.6})
    assert r.headers["Warrant-Wait"] == "timeout" and 0.5 <= time.monotonic() - t0 < 5
    assert (r.status_code, r.json()["version"]) == (200, 1)
    r = call(api, viewer, "GET", path, params={"version": 7, "timeout": 30})
    assert r.headers["Warrant-Wait"] == "changed"

    with ThreadPoolExecutor(1) as pool:
        t0 = time.monotonic()
        waiting = pool.submit(call, api, viewer, "GET", path, params={"version": 1, "timeout": 30})
        time.sleep(0.5)
        client.cancel(run_id, by="tests", revoke=False)
        r = waiting.result(timeout=30)
    assert r.headers["Warrant-Wait"] == "changed" and time.monotonic() - t0 < 5
    assert r.json()["status"] == "cancelled"
    r = call(api, viewer, "GET", path, params={"version": r.json()["version"], "timeout": 30})
    assert r.headers["Warrant-Wait"] == "settled"
    r = call(api, viewer, "GET", "/v1/runs/no-such-run/wait")
    assert (r.status_code, error(r)) == (404, "RUN_NOT_FOUND")


# --- health -----------------------------------------------------------------------------------


def test_healthz_says_which_service_is_unreachable(client):
    """A ledger nobody answers at: 503 naming the database; the broker still ok. (It said
    ``ok`` whatever was down: a stale server passed every health check.)"""
    from warrant.ledger.db import engine_for
    from warrant.runner.client.api import Client
    from warrant.runner.server.http import create_app

    gone = Client(engine=engine_for("postgresql://postgres@127.0.0.1:1/none"), publisher=None)
    with LiveServer(create_app(client=gone, tokens=object())) as server:
        r = httpx.get(server.url + "/healthz", timeout=30)
    body = r.json()
    assert (r.status_code, body["status"]) == (503, "unavailable")
    assert body["broker"]["ok"] and not body["database"]["ok"]
    assert "OperationalError" in body["database"]["error"]


def test_a_broker_that_is_gone_fails_its_check_within_the_deadline():
    from celery import Celery

    from warrant.runner.server.http.app import check_broker

    started = time.monotonic()
    check = check_broker(Celery(broker="redis://127.0.0.1:1/0"), timeout=2.0)
    assert not check.ok and check.error
    assert time.monotonic() - started < 5


# --- authentication, authorization and errors ------------------------------------------------


def test_tokens_are_required_and_checked(api, tokens, engine):
    from warrant.runner.client.tokens import Tokens

    health = call(api, None, "GET", "/healthz").json()
    assert (health["status"], health["broker"]["ok"], health["database"]["ok"]) == ("ok",) + (
        True,
    ) * 2
    for token in (None, "wrt_not-a-token"):
        r = call(api, token, "GET", "/v1/runs")
        assert (r.status_code, error(r)) == (401, "TOKEN_INVALID")
        assert r.headers["WWW-Authenticate"] == "Bearer"
    for header in (f"Basic {tokens['viewer']}", "Bearer", tokens["viewer"]):
        r = httpx.get(api + "/v1/runs", headers={"Authorization": header})
        assert (r.status_code, error(r)) == (401, "TOKEN_INVALID"), header
    token, info = Tokens(engine).create("http-revoked", "operator", created_by="tests")
    me = call(api, token, "GET", "/v1/tokens/me").json()
    assert me == {
        "token_id": info["token_id"],
        "name": "http-revoked",
        "role": "operator",
        "label": "http-revoked (operator)",
    }
    Tokens(engine).revoke(info["token_id"], by="tests")
    r = call(api, token, "GET", "/v1/tokens/me")
    assert (r.status_code, error(r)) == (401, "TOKEN_INVALID")


def test_metrics_are_served_to_readers(api, tokens):
    r = call(api, tokens["viewer"], "GET", "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "warrant_runs{" in r.text
    assert call(api, None, "GET", "/metrics").status_code == 401


def test_bad_input_is_a_4xx_with_a_code(api, tokens, client):
    op = tokens["operator"]
    r = call(api, op, "POST", "/v1/runs", json={"goal": "x"})
    assert (r.status_code, error(r)) == (422, "SPEC_INVALID")
    assert {e["field"] for e in r.json()["error"]["errors"]} >= {"subject", "planner"}
    r = call(
        api,
        op,
        "POST",
        "/v1/runs",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert (r.status_code, error(r)) == (422, "SPEC_INVALID")  # as the CLI says of a file
    nul = dict(sc.spec([CLARIFY_ONLY]), goal="a\x00b")
    assert error(call(api, op, "POST", "/v1/runs", json=nul)) == "SPEC_INVALID"
    r = call(api, op, "POST", "/v1/runs", json=[1, 2])
    assert (r.status_code, error(r)) == (422, "SPEC_INVALID")
    for params in ({"limit": 0}, {"limit": 201}, {"status": "sleeping"}, {"created_since": "x"}):
        r = call(api, op, "GET", "/v1/runs", params=params)
        assert (r.status_code, error(r)) == (422, "REQUEST_INVALID"), params
    r = call(api, op, "GET", "/v1/runs", params={"cursor": "bm9wZQ"})
    assert (r.status_code, error(r)) == (422, "CURSOR_INVALID")
    r = call(api, op, "GET", f"/v1/runs/{uuid.uuid4()}")
    assert (r.status_code, error(r)) == (404, "RUN_NOT_FOUND")
    r = call(api, op, "GET", "/v1/nothing-here")
    assert (r.status_code, error(r)) == (404, "NOT_FOUND")
    run_id = client.start_run(sc.spec([CLARIFY_ONLY]), publish=False)
    base = f"/v1/runs/{run_id}"
    cases = [
        (f"{base}/grants", {"capability": "x", "max_uses": 0}, "REQUEST_INVALID"),
        (f"{base}/grants", {"capability": "x", "max_uses": 2**40}, "REQUEST_INVALID"),
        (f"{base}/grants", {"capability": "x\x00"}, "REQUEST_INVALID"),
        (f"{base}/pre-approvals", {"tool": "nope", "tool_version": "1", "arguments": {}}, None),
        (
            f"{base}/pre-approvals",
            {"tool": "t", "tool_version": "1", "arguments": {"\x00": 1}},
            "REQUEST_INVALID",
        ),
        (f"{base}/answer", {"text": ""}, "REQUEST_INVALID"),
        (f"{base}/confirm", {}, "REQUEST_INVALID"),
        ("/v1/handoffs/x/resolve", {"outcome": "won", "reason": "r"}, "REQUEST_INVALID"),
    ]
    for path, body, code in cases:
        r = call(api, op, "POST", path, json=body)
        assert r.status_code == 422 and (code is None or error(r) == code), (path, body, r.text)
    r = call(api, op, "POST", f"{base}/answer", json={"text": "now"})
    assert (r.status_code, error(r)) == (409, "RUN_NOT_WAITING_INPUT")
    r = call(api, op, "DELETE", f"/v1/memory/{2**63}")
    assert (r.status_code, error(r)) == (422, "REQUEST_INVALID")


#: Each action: the request that takes it. Run ids that name no run: an allowed role gets past
#: authorization to the handler (404, or 422 for the invalid spec); a refused one gets 403.
NO_RUN = "00000000-0000-0000-0000-000000000000"
ACTIONS: dict[Action, tuple[str, str, dict[str, Any] | None]] = {
    Action.START_RUN: ("POST", "/v1/runs", {"goal": "no spec"}),
    Action.READ: ("GET", f"/v1/runs/{NO_RUN}", None),
    Action.PROPOSE: ("POST", f"/v1/runs/{NO_RUN}/proposals", {"proposal": {"kind": "final"}}),
    Action.CONFIRM: ("POST", f"/v1/runs/{NO_RUN}/confirm", {"proposal_hash": "0" * 64}),
    Action.ANSWER: ("POST", f"/v1/runs/{NO_RUN}/answer", {"text": "yes"}),
    Action.CANCEL: ("POST", f"/v1/runs/{NO_RUN}/cancel", {"reason": "stop"}),
    Action.GRANT: ("POST", f"/v1/runs/{NO_RUN}/grants", {"capability": "search:public"}),
    Action.PRE_APPROVE: (
        "POST",
        f"/v1/runs/{NO_RUN}/pre-approvals",
        {"tool": "search_public", "tool_version": "1", "arguments": {"query": "q"}},
    ),
    Action.RESOLVE_HANDOFF: (
        "POST",
        f"/v1/handoffs/{NO_RUN}/resolve",
        {"outcome": "failed", "reason": "checked by hand"},
    ),
    Action.REVOKE_MEMORY: ("DELETE", "/v1/memory/999999999", None),
}
#: Who may do what (the issue's table, written out: not read from warrant.runner.authz).
MAY = {
    "producer": {Action.START_RUN, Action.PROPOSE, Action.READ, Action.CANCEL},
    "approver": {Action.READ, Action.CONFIRM, Action.ANSWER},
    "operator": set(ACTIONS),
    "viewer": {Action.READ},
}


@pytest.mark.parametrize("action", list(ACTIONS), ids=str)
@pytest.mark.parametrize("role", ROLES)
def test_role_matrix(api, tokens, role, action):
    method, path, body = ACTIONS[action]
    r = call(api, tokens[role], method, path, json=body)
    assert (action in MAY[role]) == allowed(role, action)
    if action in MAY[role]:
        expected = 422 if action is Action.START_RUN else 404
        assert r.status_code == expected, r.text
    else:
        assert (r.status_code, error(r)) == (403, "FORBIDDEN")


@pytest.mark.slow
def test_warrant_serve(tmp_path, worker):
    """The command: a token from `warrant token create`, then `warrant serve` answers."""
    import json
    import subprocess
    import sys

    from tests.integration.test_cli import warrant
    from warrant.runner.stack.supervisor import stop_with_parent

    created = warrant("token", "create", "serve-test", "--role", "producer", "--json")
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)["token"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "warrant.runner.cli", "serve", "--port", str(port)],
        stdout=log,
        stderr=log,
        preexec_fn=stop_with_parent,
    )
    try:
        wait_for(lambda: _healthy(api, proc), timeout=30, what="warrant serve")
        me = call(api, token, "GET", "/v1/tokens/me").json()
        assert me["label"] == "serve-test (producer)"
        spec = sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")])
        run = call(api, token, "POST", "/v1/runs", json=spec).json()
        done = wait_until(api, token, run["run_id"], {"completed", "failed"})
        assert (done["status"], done["started_by"]) == ("completed", me["label"])
        assert "/v1/runs/{run_id}/wait" in call(api, None, "GET", "/openapi.json").json()["paths"]
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()
    # uvicorn shuts down cleanly on SIGTERM, then re-raises the signal it caught
    assert proc.returncode in (0, -signal.SIGTERM), proc.returncode
    assert "Finished server process" in (tmp_path / "serve.log").read_text()


def _healthy(api: str, proc: Any) -> bool:
    assert proc.poll() is None, "warrant serve exited"
    try:
        return httpx.get(api + "/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


# --- the OpenAPI document, checked by schemathesis -------------------------------------------


def _schema() -> Any:
    """The API's document, built without services."""
    import schemathesis

    from warrant.runner.server.http import create_app

    document = create_app(client=SimpleNamespace(engine=None), tokens=object()).openapi()
    return schemathesis.openapi.from_dict(document)


SCHEMA = _schema()
OPERATIONS = [op.ok().label for op in SCHEMA.get_all_operations()]


@pytest.fixture(scope="module")
def known_runs(client: Any, worker: Any) -> list[str]:
    """Runs the generated requests are pointed at (besides random ids): one completed, one
    waiting for a confirmation, one never published (running)."""
    done = client.start_run(sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")]))
    subject = f"http-schema-{uuid.uuid4().hex[:6]}"
    waiting = client.start_run(memory_spec([sc.search("p1"), save()], subject))
    idle = client.start_run(sc.spec([CLARIFY_ONLY]), publish=False)
    for run_id in (done, waiting):
        assert client.wait(run_id, timeout=30).status in ("completed", "waiting_confirmation")
    return [done, waiting, idle]


@pytest.mark.slow
@pytest.mark.parametrize("label", OPERATIONS)
def test_the_api_matches_its_openapi_document(label, api, tokens, known_runs):
    """Generated requests (schemathesis; valid ones and invalid ones) with an operator's
    token: no 500; every response is documented and matches its schema (status, content
    type, body, headers); no operation works without a token. Half the run ids name real
    runs, to get past the lookups."""
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode, checks

    operation = SCHEMA.find_operation_by_label(label)
    excluded = [
        checks.positive_data_acceptance,  # valid input meets 404 and 409 on purpose
        checks.negative_data_rejection,  # the token and real run ids go in after generation
        checks.use_after_free,
        checks.ensure_resource_availability,
    ]

    calls = itertools.count()

    @given(case=operation.as_strategy() | operation.as_strategy(GenerationMode.NEGATIVE))
    @settings(
        max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case: Any) -> None:
        n = next(calls)
        if label == "POST /v1/runs" and isinstance(case.body, dict) and "planner" in case.body:
            case.body["planner"] = {"kind": "fixture", "outputs": []}  # a run that just ends
        body = case.body if isinstance(case.body, dict) else {}
        if label == "POST /v1/tools/disable" and isinstance(body.get("tool"), str):
            body["tool"] = f"schemathesis-{n}"  # never a tool another test calls
        if "run_id" in (case.path_parameters or {}) and n % 2:
            case.path_parameters["run_id"] = known_runs[n // 2 % len(known_runs)]
        # A long poll (``/wait``'s timeout, a proposal's ``wait``) on a run that does not move
        # lasts its whole duration: at most 0.5 s here (a generated 10.75 s once outlasted the
        # client's 10 s read timeout).
        for name in ("timeout", "wait"):
            waits = name == "timeout" and label.endswith("/wait")  # its default is 30 s
            value = (case.query or {}).get(name, 0.5 if waits else None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                case.query = {**(case.query or {}), name: min(value, 0.5)}
        case.call_and_validate(
            base_url=api,
            headers={"Authorization": f"Bearer {tokens['operator']}"},
            excluded_checks=excluded,
        )

    check()


@pytest.mark.slow
def test_an_external_agent_proposes_over_http(api, tokens, engine, worker):
    """Planner kind ``external``: a producer proposes each step of the run it started, an
    approver confirms the exact hash, the long poll returns each decision."""
    from warrant.runner.client.remote import RemoteClient

    subject = f"http-external-{uuid.uuid4().hex[:8]}"
    spec = {**memory_spec([], subject), "planner": {"kind": "external", "agent": "curl"}}
    run_id = call(api, tokens["producer"], "POST", "/v1/runs", json=spec).json()["run_id"]
    path = f"/v1/runs/{run_id}/proposals"
    r = call(api, tokens["producer"], "POST", path + "?wait=20", json={"proposal": sc.search("p1")})
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["outcome"], r.json()["step"]) == (
        "executed",
        "succeeded",
        1,
    )
    other = call(api, tokens["operator"], "POST", "/v1/runs", json=spec).json()["run_id"]
    r = call(api, tokens["producer"], "POST", f"/v1/runs/{other}/proposals", json={"proposal": {}})
    assert (r.status_code, error(r)) == (403, "NOT_YOUR_RUN")
    for bad in ({"proposal": "text"}, {"proposal": {"kind": "final\x00"}}, {"step": 1}):
        r = call(api, tokens["producer"], "POST", path, json=bad)
        assert (r.status_code, error(r)) == (422, "REQUEST_INVALID"), bad
    r = call(api, tokens["viewer"], "POST", path, json={"proposal": sc.search("p2")})
    assert (r.status_code, error(r)) == (403, "FORBIDDEN")

    with RemoteClient(api, tokens["producer"]) as remote:
        waiting = remote.propose(run_id, save("zh-CN"), wait_s=20)
        assert (waiting.step, waiting.state) == (2, "awaiting_confirmation")
        r = call(api, tokens["producer"], "POST", path, json={"proposal": sc.search("p3")})
        assert (r.status_code, error(r)) == (409, "PROPOSAL_IN_FLIGHT")
        confirm = {"proposal_hash": waiting.proposal_hash}
        ok = call(api, tokens["approver"], "POST", f"/v1/runs/{run_id}/confirm", json=confirm)
        assert ok.status_code == 200, ok.text
        done = remote.decision(run_id, 2, wait_s=30, seen="awaiting_confirmation")
        if done.state == "pending":
            done = remote.decision(run_id, 2, wait_s=30)
        assert (done.state, done.outcome, done.observation_id) == (
            "executed",
            "succeeded",
            "tool-2",
        )
        final = {"kind": "final", "answer": "Saved.", "citations": ["tool-1", "tool-2"]}
        assert remote.propose(run_id, final, wait_s=20).state == "completed"
    r = call(api, tokens["viewer"], "GET", f"{path}/2")
    assert r.status_code == 200 and r.json()["state"] == "executed"
    submitted = facts.events(engine, run_id, "proposal.submitted")
    assert {e.details["by"] for e in submitted} == {tokens["label:producer"]}


# --- refusals that ask: a run waiting for a grant, resumed over HTTP -------------------------


def test_a_run_waiting_for_a_grant_is_shown_and_resumed_by_an_operator(api, tokens, engine, worker):
    write = {
        "kind": "tool",
        "proposal_id": "p1",
        "tool": "write_artifact",
        "tool_version": "1",
        "arguments": {"path": "run-output/http-grant.md", "content": "hi"},
        "reason_summary": "",
        "source_observation_ids": [],
    }
    spec = sc.spec([write, sc.final("written", "tool-1")])
    spec["policy"] = {"on_missing_grant": "ask"}
    r = call(api, tokens["producer"], "POST", "/v1/runs", json=spec)
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    info = wait_until(api, tokens["viewer"], run_id, {"waiting_grant", "completed", "failed"})
    assert (info["status"], info["stop_reason"]) == ("waiting_grant", "GRANT_REQUIRED")
    waiting = info["waiting_for_grant"]
    assert (waiting["tool"], waiting["capability"], waiting["resources"]) == (
        "write_artifact",
        "artifact:write",
        ["run-output/http-grant.md"],
    )
    listed = call(api, tokens["viewer"], "GET", "/v1/runs", params={"status": "waiting_grant"})
    assert run_id in [x["run_id"] for x in listed.json()["runs"]]
    metrics = call(api, tokens["viewer"], "GET", "/metrics").text
    assert 'warrant_runs{status="waiting_grant"}' in metrics

    base = f"/v1/runs/{run_id}/grants"
    grant = {"capability": "artifact:write", "resource_scope": "run-output/*"}
    for role in ("producer", "viewer", "approver"):
        r = call(api, tokens[role], "POST", base, json=grant)
        assert (r.status_code, error(r)) == (403, "FORBIDDEN"), role
    for bad in ({}, {"capability": ""}, {"capability": "a", "max_uses": 0}, {"capability": 1}):
        r = call(api, tokens["operator"], "POST", base, json=bad)
        assert (r.status_code, error(r)) == (422, "REQUEST_INVALID"), bad
    assert call(api, tokens["viewer"], "GET", f"/v1/runs/{run_id}").json()["status"] == (
        "waiting_grant"
    )

    r = call(api, tokens["operator"], "POST", base, json=grant)
    assert r.status_code == 201, r.text
    info = wait_until(api, tokens["viewer"], run_id, {"completed", "failed", "cancelled"})
    assert (info["status"], info["stop_reason"]) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert info["waiting_for_grant"] is None and info["model_calls"] == 2
    assert facts.commands(engine, run_id) == 1 and facts.outcomes(engine, run_id) == 1
    [added] = facts.events(engine, run_id, "grant.added")
    assert added.details["by"] == tokens["label:operator"]


def test_a_grant_for_a_while_and_a_widening_over_http(api, tokens, client, engine):
    """``expires_in_s`` / ``expires_at`` and ``widen`` (issue 36 item 6): a grant wider than
    the run's standing one is 409 ``GRANT_WIDENING_REFUSED`` until ``widen`` says so."""
    standing = {"capability": "artifact:write", "resource_scope": "run-output/reports/*"}
    run_id = client.start_run(sc.spec([sc.search("p1")], grants=[standing]), publish=False)
    base = f"/v1/runs/{run_id}/grants"
    wide = {"capability": "artifact:write", "resource_scope": "run-output/*", "expires_in_s": 600}
    r = call(api, tokens["operator"], "POST", base, json=wide)
    assert (r.status_code, error(r)) == (409, "GRANT_WIDENING_REFUSED")
    for bad in ({**wide, "expires_in_s": 0}, {**standing, "expires_at": "2030-01-01T00:00:00"}):
        r = call(api, tokens["operator"], "POST", base, json=bad)
        assert (r.status_code, error(r)) == (422, "REQUEST_INVALID"), bad
    r = call(api, tokens["operator"], "POST", base, json={**wide, "widen": True})
    assert r.status_code == 201, r.text
    [event] = facts.events(engine, run_id, "grant.widened")
    assert event.details["grant_id"] == r.json()["grant_id"]
    assert event.details["wider_on"] == ["resource_scope"]
    assert event.details["by"] == tokens["label:operator"]
    narrower = {**standing, "expires_at": "2030-01-01T00:00:00Z"}
    assert call(api, tokens["operator"], "POST", base, json=narrower).status_code == 201
    assert len(facts.events(engine, run_id, "grant.widened")) == 1
