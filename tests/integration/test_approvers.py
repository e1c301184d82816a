"""Requester ≠ approver and M-of-N approvals on the real stack: the HTTP API under uvicorn,
PostgreSQL, Redis and a Celery worker running the test tool ``pay`` (tests/approvals_tool.py),
whose fake service counts the payments it made."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.approvals_tool import CAPABILITY, paid, proposal
from tests.integration.test_cli import warrant
from tests.integration.test_http_api import LiveServer, call, error, wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]

DONE = {"completed", "failed"}


@pytest.fixture(scope="module")
def api(client: Any) -> Iterator[str]:
    from warrant.runner.server.http import create_app

    with LiveServer(create_app(client=client)) as server:
        yield server.url


@pytest.fixture(scope="module")
def people(engine: Any) -> dict[str, str]:
    """Tokens: alice starts runs (operator) and also holds an approver token; bob and carol
    approve. ``label:<key>`` is each token's label."""
    from warrant.runner.client.tokens import Tokens

    suffix = uuid.uuid4().hex[:6]
    made: dict[str, str] = {}
    for key, name, role in (
        ("alice", "alice", "operator"),
        ("alice_approver", "alice", "approver"),
        ("bob", "bob", "approver"),
        ("carol", "carol", "approver"),
    ):
        token, _ = Tokens(engine).create(f"{name}-{suffix}", role, created_by="tests")
        made[key] = token
        made[f"label:{key}"] = f"{name}-{suffix} ({role})"
    return made


def _start(api: str, people: dict[str, str], ledger: Path, amount: int, tool: str = "pay"):
    spec = sc.spec(
        [proposal(ledger, amount, tool=tool), sc.final("Paid.", "tool-1")],
        grants=[{"capability": CAPABILITY}],
    )
    r = call(api, people["alice"], "POST", "/v1/runs", json=spec)
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    info = wait_until(api, people["bob"], run_id, {"waiting_confirmation", *DONE})
    assert info["status"] == "waiting_confirmation", info
    return run_id, info["confirmation_request"]


def _decide(api: str, token: str, run_id: str, phash: str, action: str = "confirm"):
    return call(api, token, "POST", f"/v1/runs/{run_id}/{action}", json={"proposal_hash": phash})


def test_the_requesters_own_token_cannot_confirm_another_approver_can(
    api, people, engine, worker, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    ledger = tmp_path / "payments"
    run_id, request = _start(api, people, ledger, 500)
    assert (request["approvals_required"], request["approved_by"]) == (1, [])
    for own in ("alice", "alice_approver"):  # the same principal whatever the token's role
        r = _decide(api, people[own], run_id, request["proposal_hash"])
        assert (r.status_code, error(r)) == (403, "OWN_RUN_APPROVAL_FORBIDDEN")
        r = _decide(api, people[own], run_id, request["proposal_hash"], "decline")
        assert (r.status_code, error(r)) == (403, "OWN_RUN_APPROVAL_FORBIDDEN")
    assert paid(ledger) == 0 and not facts.events(engine, run_id, "confirmation.approved")

    ok = _decide(api, people["bob"], run_id, request["proposal_hash"])
    assert ok.status_code == 200, ok.text
    assert (ok.json()["decision"], ok.json()["waiting_for_more"]) == ("approved", False)
    done = wait_until(api, people["bob"], run_id, DONE)
    assert done["status"] == "completed", done
    assert paid(ledger) == 1
    [approved] = facts.events(engine, run_id, "confirmation.approved")
    assert approved.details["by"] == people["label:bob"]
    assert not facts.events(engine, run_id, "confirmation.self_approved")


def test_a_tool_that_allows_self_approval_lets_the_starter_confirm_traced(
    api, people, engine, worker, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    ledger = tmp_path / "payments"
    run_id, request = _start(api, people, ledger, 500, tool="pay_self_ok")
    ok = _decide(api, people["alice_approver"], run_id, request["proposal_hash"])
    assert ok.status_code == 200, ok.text
    assert wait_until(api, people["bob"], run_id, DONE)["status"] == "completed"
    assert paid(ledger) == 1
    [traced] = facts.events(engine, run_id, "confirmation.self_approved")
    assert traced.details["allowed_by"] == "tool"
    assert traced.details["by"] == people["label:alice_approver"]
    assert traced.details["started_by"] == people["label:alice"]


def test_the_deployment_opt_out_lets_the_starter_confirm_traced(
    api, people, engine, worker, tmp_path, monkeypatch
) -> None:
    ledger = tmp_path / "payments"
    run_id, request = _start(api, people, ledger, 500)
    monkeypatch.setenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", "1")
    ok = _decide(api, people["alice"], run_id, request["proposal_hash"])
    assert ok.status_code == 200, ok.text
    assert wait_until(api, people["bob"], run_id, DONE)["status"] == "completed"
    assert paid(ledger) == 1
    [traced] = facts.events(engine, run_id, "confirmation.self_approved")
    assert (traced.details["allowed_by"], traced.details["tool"]) == ("deployment", "pay")


def test_two_of_n_waits_counts_each_principal_once_and_executes_once(
    api, people, engine, worker, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    ledger = tmp_path / "payments"
    run_id, request = _start(api, people, ledger, 250_000)
    phash = request["proposal_hash"]
    assert (request["approvals_required"], request["approved_by"]) == (2, [])

    first = _decide(api, people["bob"], run_id, phash)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["waiting_for_more"] is True
    assert (body["approvals_required"], body["approved_by"]) == (2, [people["label:bob"]])
    time.sleep(1.0)  # the worker would have run it by now, had it been released
    shown = call(api, people["carol"], "GET", f"/v1/runs/{run_id}").json()
    assert shown["status"] == "waiting_confirmation"
    assert [a["by"] for a in shown["confirmation_request"]["approved_by"]] == [people["label:bob"]]
    assert paid(ledger) == 0

    again = _decide(api, people["bob"], run_id, phash)
    assert (again.status_code, error(again)) == (409, "ALREADY_APPROVED")
    own = _decide(api, people["alice_approver"], run_id, phash)
    assert (own.status_code, error(own)) == (403, "OWN_RUN_APPROVAL_FORBIDDEN")
    wrong = _decide(api, people["carol"], run_id, "0" * 64)
    assert (wrong.status_code, error(wrong)) == (409, "CONFIRMATION_HASH_MISMATCH")

    table = warrant("run", "show", run_id)  # the local CLI, on the database
    assert table.returncode == 0, table.stderr
    assert f"1 of 2 approvals: {people['label:bob']}" in table.stdout

    second = _decide(api, people["carol"], run_id, phash)
    assert second.status_code == 200, second.text
    assert second.json()["waiting_for_more"] is False
    done = wait_until(api, people["bob"], run_id, DONE)
    assert done["status"] == "completed", done
    assert paid(ledger) == 1
    [recorded] = facts.events(engine, run_id, "confirmation.approval_recorded")
    assert recorded.details["approvals_required"] == 2
    [approved] = facts.events(engine, run_id, "confirmation.approved")
    assert approved.details["approved_by"] == [people["label:bob"], people["label:carol"]]
    assert approved.details["proposal_hash"] == phash


def test_a_decline_by_anyone_declines_after_a_first_approval(
    api, people, engine, worker, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    ledger = tmp_path / "payments"
    run_id, request = _start(api, people, ledger, 250_000)
    phash = request["proposal_hash"]
    assert _decide(api, people["bob"], run_id, phash).json()["waiting_for_more"] is True
    r = _decide(api, people["carol"], run_id, phash, "decline")
    assert r.status_code == 200 and r.json()["decision"] == "declined", r.text
    done = wait_until(api, people["bob"], run_id, DONE)  # its final cites a call never made
    assert done["status"] == "failed", done
    assert paid(ledger) == 0
    [declined] = facts.events(engine, run_id, "confirmation.declined")
    assert declined.details["by"] == people["label:carol"]


def test_the_cli_prints_approvals_with_json(people, client, worker, tmp_path, monkeypatch) -> None:
    """The local CLI (database): ``--by`` is an unauthenticated name compared by name."""
    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    ledger = tmp_path / "payments"
    spec = sc.spec(
        [proposal(ledger, 250_000), sc.final("Paid.", "tool-1")],
        grants=[{"capability": CAPABILITY}],
    )
    run_id = client.start_run(spec, started_by="dave")
    info = client.wait(run_id, timeout=30, until={"waiting_confirmation", *DONE})
    phash = info.confirmation_request["proposal_hash"]
    own = warrant("run", "confirm", run_id, "--proposal-hash", phash, "--by", "dave", "--json")
    assert own.returncode == 2 and json.loads(own.stdout)["error"]["code"] == (
        "OWN_RUN_APPROVAL_FORBIDDEN"
    )
    first = warrant("run", "confirm", run_id, "--proposal-hash", phash, "--by", "erin", "--json")
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert (out["waiting_for_more"], out["approvals_required"], out["approved_by"]) == (
        True,
        2,
        ["erin"],
    )
    twice = warrant("run", "confirm", run_id, "--proposal-hash", phash, "--by", "erin", "--json")
    assert json.loads(twice.stdout)["error"]["code"] == "ALREADY_APPROVED"
    last = warrant("run", "confirm", run_id, "--proposal-hash", phash, "--by", "frank", "--json")
    assert json.loads(last.stdout)["waiting_for_more"] is False
    assert client.wait(run_id, timeout=30).status == "completed"
    assert paid(ledger) == 1


def test_the_inbox_shows_who_has_approved_and_refuses_the_same_person_twice(
    api, people, engine, worker, tmp_path, monkeypatch
) -> None:
    """The web inbox, in plain HTTP with the session cookie: bob approves a 2-of-N payment,
    the request stays with "1 of 2 approvals: bob"; bob again is refused; carol releases it."""
    import re

    import httpx

    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    ledger = tmp_path / "payments"
    run_id, request = _start(api, people, ledger, 250_000)
    phash = request["proposal_hash"]

    def session(who: str) -> httpx.Client:
        c = httpx.Client(base_url=api, timeout=30)
        r = c.post("/ui/login", data={"token": people[who], "next": "/ui/inbox"})
        assert r.status_code == 303, r.text
        return c

    def form(c: httpx.Client) -> dict[str, str]:
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', c.get("/ui/inbox").text)
        assert found
        return {"decision": "approve", "proposal_hash": phash, "csrf": found.group(1)}

    decide = f"/ui/runs/{run_id}/decide"
    bob, carol, alice = session("bob"), session("carol"), session("alice")
    try:
        own = alice.post(decide, data=form(alice))
        assert own.status_code == 403 and "OWN_RUN_APPROVAL_FORBIDDEN" in own.text
        ok = bob.post(decide, data=form(bob))
        assert ok.status_code == 303, ok.text
        shown = bob.get(ok.headers["location"]).text
        assert "approval recorded (1 of 2)" in shown
        assert f"1 of 2 approvals: {people['label:bob']}" in carol.get("/ui/inbox").text
        twice = bob.post(decide, data=form(bob))
        assert twice.status_code == 409 and "ALREADY_APPROVED" in twice.text
        assert paid(ledger) == 0
        assert carol.post(decide, data=form(carol)).status_code == 303
    finally:
        for c in (bob, carol, alice):
            c.close()
    assert wait_until(api, people["bob"], run_id, DONE)["status"] == "completed"
    assert paid(ledger) == 1


def test_a_pre_approval_cannot_stand_for_two_approvers(api, people, tmp_path) -> None:
    # One person's word written into the spec would otherwise skip the second approver.
    ledger = tmp_path / "payments"
    big = proposal(ledger, 250_000)
    spec = sc.spec([big, sc.final("Paid.", "tool-1")], grants=[{"capability": CAPABILITY}])
    spec["pre_approved"] = [
        {"tool": "pay", "tool_version": "1", "arguments": big["arguments"], "approved_by": "bob"}
    ]
    r = call(api, people["alice"], "POST", "/v1/runs", json=spec)
    assert r.status_code == 422, r.text
    assert error(r) == "SPEC_INVALID"
    assert "2 distinct approvers" in r.text and "pre_approved.0.approved_by" in r.text
    assert paid(ledger) == 0
