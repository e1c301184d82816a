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

import httpx
import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.approvals_tool import CAPABILITY, paid, proposal
from tests.conftest import wait_for
from tests.integration.test_cli import warrant
from tests.integration.test_http_api import LiveServer, call, error, wait_until
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, Proposal

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


# --- an approver corrects a parameter instead of approving as is (000 §14; 003: 允许修改) ------


def _correct(api: str, token: str, run_id: str, phash: str, changes: dict[str, Any]):
    body = {"proposal_hash": phash, "changes": changes, "reason": "too much"}
    return call(api, token, "POST", f"/v1/runs/{run_id}/correct", json=body)


def _proposals(engine: Any, run_id: str) -> list[Proposal]:
    with session_scope(engine) as s:
        q = select(Proposal).where(Proposal.run_id == run_id).order_by(Proposal.step)
        return list(s.scalars(q))


def _web(api: str, token: str) -> httpx.Client:
    c = httpx.Client(base_url=api, timeout=30)
    r = c.post("/ui/login", data={"token": token, "next": "/ui/inbox"})
    assert r.status_code == 303, r.text
    return c


def test_an_approver_corrects_a_refund_down_and_only_the_corrected_refund_is_made(
    api, people, engine, worker, draft_worker, demo, monkeypatch
) -> None:
    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    order = f"ord_{uuid.uuid4().hex[:10]}"
    refund = {
        "kind": "tool",
        "proposal_id": "p1",
        "tool": "issue_refund",
        "tool_version": "1",
        "arguments": {"order_id": order, "amount_cents": 12_000, "currency": "EUR"},
        "reason_summary": "the customer asked",
        "source_observation_ids": [],
    }
    grant = {"capability": "payments:refund", "resource_scope": f"order:{order}"}
    spec = sc.spec([refund, sc.final("Refunded.", "tool-2")], grants=[grant])
    spec["policy"] = {"confirm_writes": True}  # the demo's refunds are relaxed in tests
    r = call(api, people["alice"], "POST", "/v1/runs", json=spec)
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    info = wait_until(api, people["bob"], run_id, {"waiting_confirmation", *DONE})
    assert info["status"] == "waiting_confirmation", info
    impact = {"amount": "120.00", "currency": "EUR", "target": f"order {order}"}
    assert info["confirmation_request"]["estimated_impact"] == impact
    inbox = call(api, people["bob"], "GET", "/v1/confirmations").json()["confirmations"]
    [shown] = [c for c in inbox if c["run_id"] == run_id]
    assert shown["estimated_impact"] == impact
    page = _web(api, people["bob"])
    try:
        html = page.get("/ui/inbox").text
    finally:
        page.close()
    card = html[html.index(f'id="req-{run_id}"') :]
    assert '<span data-impact="amount"><code>amount</code>: 120.00</span>' in card
    old = info["confirmation_request"]["proposal_hash"]

    own = _correct(api, people["alice_approver"], run_id, old, {"amount_cents": 9_000})
    assert (own.status_code, error(own)) == (403, "OWN_RUN_APPROVAL_FORBIDDEN")
    same = _correct(api, people["bob"], run_id, old, {"amount_cents": 12_000})
    assert (same.status_code, error(same)) == (422, "CORRECTION_EMPTY")
    r = _correct(api, people["bob"], run_id, old, {"amount_cents": 9_000})
    assert r.status_code == 200, r.text
    corrected = r.json()
    assert corrected["proposal_hash"] != old and corrected["original_hash"] == old
    assert (corrected["changed"], corrected["approved"], corrected["step"]) == (
        ["amount_cents"],
        True,
        2,
    )
    done = wait_until(api, people["bob"], run_id, DONE)
    assert done["status"] == "completed", done

    # Exactly one effect, with the corrected amount; the original never ran.
    assert demo.refund_count(order_id=order) == 1
    with session_scope(engine) as s:
        [command] = s.scalars(select(Command).where(Command.run_id == run_id)).all()
        token = command.idempotency_token
    assert command.arguments["amount_cents"] == 9_000
    assert demo.get_refund(key=token)["amount_cents"] == 9_000
    first, second = _proposals(engine, run_id)[:2]
    assert (first.status, first.rejection_code) == ("rejected", "CONFIRMATION_DECLINED")
    assert (second.status, second.proposal_hash) == ("accepted", corrected["proposal_hash"])
    [edit] = facts.events(engine, run_id, "proposal.corrected")
    assert edit.details["by"] == people["label:bob"] and edit.details["via"] == "api"
    assert (edit.details["original_hash"], edit.details["proposal_hash"]) == (
        old,
        corrected["proposal_hash"],
    )
    assert edit.details["changed"] == ["amount_cents"]
    # Gated again from the start, and let through by the edit as bob's approval of the new hash.
    checked = facts.events(engine, run_id, "policy.confirmation.checked")
    assert [c.details["proposal_hash"] for c in checked] == [old, corrected["proposal_hash"]]
    assert checked[-1].details["result"] == "ok"
    [approved] = facts.events(engine, run_id, "confirmation.approved")
    assert approved.details["proposal_hash"] == corrected["proposal_hash"]
    assert command.confirmation_id == approved.details["confirmation_id"]


def test_a_correction_that_widens_beyond_the_grants_scope_is_refused_by_the_gate(
    api, people, engine, worker, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    ledger = tmp_path / "payments"
    spec = sc.spec(
        [proposal(ledger, 500), sc.final("Paid.", "tool-2")],
        grants=[{"capability": CAPABILITY, "resource_scope": "acme"}],
    )
    r = call(api, people["alice"], "POST", "/v1/runs", json=spec)
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    info = wait_until(api, people["bob"], run_id, {"waiting_confirmation", *DONE})
    request = info["confirmation_request"]
    assert request["estimated_impact"] == "pay 5.00 to acme"
    r = _correct(api, people["bob"], run_id, request["proposal_hash"], {"payee": "mallory"})
    assert r.status_code == 200 and r.json()["approved"] is True, r.text
    done = wait_until(api, people["bob"], run_id, DONE)  # its final cites a call never made
    assert done["status"] == "failed", done
    assert paid(ledger) == 0
    assert facts.commands(engine, run_id) == 0
    assert facts.rejection_codes(engine, run_id)[0] == "RESOURCE_OUT_OF_SCOPE"
    corrected = _proposals(engine, run_id)[1]
    assert (corrected.status, corrected.rejection_code) == ("rejected", "RESOURCE_OUT_OF_SCOPE")
    assert (corrected.raw or {})["arguments"]["payee"] == "mallory"


def test_a_correction_that_needs_two_approvers_waits_for_its_own_confirmation(
    api, people, engine, worker, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    ledger = tmp_path / "payments"
    spec = sc.spec(
        [proposal(ledger, 500), sc.final("Paid.", "tool-2")], grants=[{"capability": CAPABILITY}]
    )
    r = call(api, people["alice"], "POST", "/v1/runs", json=spec)
    run_id = r.json()["run_id"]
    info = wait_until(api, people["bob"], run_id, {"waiting_confirmation", *DONE})
    old = info["confirmation_request"]["proposal_hash"]
    r = _correct(api, people["bob"], run_id, old, {"amount_cents": 150_000})
    assert r.status_code == 200 and r.json()["approved"] is False, r.text
    new = r.json()["proposal_hash"]

    def asks_again() -> dict[str, Any]:
        shown = call(api, people["carol"], "GET", f"/v1/runs/{run_id}").json()
        if (shown["confirmation_request"] or {}).get("proposal_hash") == new:
            return shown
        return {}

    shown = wait_for(asks_again, what="the corrected proposal's own request")
    request = shown["confirmation_request"]
    assert (request["approvals_required"], request["approved_by"]) == (2, [])
    assert request["estimated_impact"] == "pay 1500.00 to acme"
    assert paid(ledger) == 0
    assert _decide(api, people["bob"], run_id, new).json()["waiting_for_more"] is True
    assert _decide(api, people["carol"], run_id, new).json()["waiting_for_more"] is False
    assert wait_until(api, people["bob"], run_id, DONE)["status"] == "completed"
    assert ledger.read_text().splitlines() == ["acme 150000"]


def test_the_cli_corrects_with_set_and_json(people, client, engine, worker, tmp_path) -> None:
    ledger = tmp_path / "payments"
    spec = sc.spec(
        [proposal(ledger, 500), sc.final("Paid.", "tool-2")], grants=[{"capability": CAPABILITY}]
    )
    run_id = client.start_run(spec, started_by="dave")
    info = client.wait(run_id, timeout=30, until={"waiting_confirmation", *DONE})
    phash = info.confirmation_request["proposal_hash"]
    shown = warrant("run", "show", run_id)
    assert "estimated_impact: pay 5.00 to acme" in shown.stdout, shown.stdout
    args = ("run", "correct", run_id, "--proposal-hash", phash, "--by", "erin", "--json")
    bad = warrant(*args, "--set", "amount_cents=-1")
    assert json.loads(bad.stdout)["error"]["code"] == "CORRECTION_INVALID"
    ok = warrant(*args, "--set", "amount_cents=250", "--set", 'payee="acme"')
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert (out["changed"], out["approved"], out["original_hash"]) == (
        ["amount_cents"],
        True,
        phash,
    )
    assert client.wait(run_id, timeout=30, until=DONE).status == "completed"
    assert ledger.read_text().splitlines() == ["acme 250"]
    [edit] = facts.events(engine, run_id, "proposal.corrected")
    assert (edit.details["by"], edit.details["via"]) == ("erin", "cli")
