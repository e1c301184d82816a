"""Approvals bound to the state the approver saw (``Tool.precondition``) on the real stack:
PostgreSQL, Redis and a Celery worker running ``withdraw`` (tests/precondition_tool.py) over a
fake account service whose state the tests move between the request and the approval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_cli import warrant
from tests.precondition_tool import CAPABILITY, account, move, proposal, withdrawn
from warrant.ledger.db import session_scope
from warrant.ledger.models import Confirmation, OutcomeRow

pytestmark = [pytest.mark.services, pytest.mark.slow]

WAITING = {"waiting_confirmation", "completed", "failed"}


def _start(client: Any, tmp_path: Path, *, cite: str) -> tuple[str, Path, Path, Any]:
    acct, ledger = account(tmp_path / "account.json", 50_000), tmp_path / "withdrawals"
    spec = sc.spec(
        [proposal(acct, ledger, 1_000), sc.final("Withdrawn.", cite)],
        grants=[{"capability": CAPABILITY}],
    )
    run_id = client.start_run(spec)
    info = client.wait(run_id, timeout=30, until=WAITING)
    assert info.status == "waiting_confirmation", info
    return run_id, acct, ledger, info.confirmation_request


def _confirmations(engine: Any, run_id: str) -> list[Confirmation]:
    with session_scope(engine) as s:
        q = select(Confirmation).where(Confirmation.run_id == run_id)
        return list(s.scalars(q.order_by(Confirmation.created_at)))


def _outcome_codes(engine: Any, run_id: str) -> list[str | None]:
    with session_scope(engine) as s:
        q = select(OutcomeRow.code).where(OutcomeRow.run_id == run_id).order_by(OutcomeRow.id)
        return list(s.scalars(q))


def test_an_unchanged_state_runs_once_and_the_approval_keeps_its_fingerprint(
    client, engine, worker, tmp_path
) -> None:
    run_id, _, ledger, request = _start(client, tmp_path, cite="tool-1")
    shown = request["precondition"]
    assert shown["summary"] == {"balance_cents": "50000", "status": "open"}
    assert len(shown["fingerprint"]) == 64
    client.confirm(run_id, proposal_hash=request["proposal_hash"], by="bob")
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.answer) == ("completed", "Withdrawn."), info
    assert withdrawn(ledger) == 1
    [approval] = _confirmations(engine, run_id)
    assert approval.precondition_fingerprint == shown["fingerprint"] and approval.used
    [checked] = facts.events(engine, run_id, "precondition.checked")
    assert checked.details["fingerprint"] == shown["fingerprint"]
    assert not facts.events(engine, run_id, "precondition.changed")


def test_a_moved_state_refuses_the_call_and_asks_again_with_the_new_fingerprint(
    client, engine, worker, tmp_path
) -> None:
    run_id, acct, ledger, request = _start(client, tmp_path, cite="tool-2")
    before = request["precondition"]["fingerprint"]
    move(acct, balance_cents=700)  # the balance moves after the approver looked
    client.confirm(run_id, proposal_hash=request["proposal_hash"], by="bob")
    again = client.wait(run_id, timeout=30, until=WAITING)
    assert again.status == "waiting_confirmation", again
    asked = again.confirmation_request
    assert withdrawn(ledger) == 0
    assert asked["proposal_hash"] == request["proposal_hash"]
    assert asked["precondition"]["summary"]["balance_cents"] == "700"
    after = asked["precondition"]["fingerprint"]
    assert after != before and asked["approved_by"] == []
    assert _outcome_codes(engine, run_id) == ["PRECONDITION_CHANGED"]
    [changed] = facts.events(engine, run_id, "precondition.changed")
    assert (changed.details["approved_fingerprint"], changed.details["fingerprint"]) == (
        before,
        after,
    )
    [old] = _confirmations(engine, run_id)
    assert old.used and old.precondition_fingerprint == before  # spent: it cannot run again

    client.confirm(run_id, proposal_hash=asked["proposal_hash"], by="bob")
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.answer) == ("completed", "Withdrawn."), info
    assert withdrawn(ledger) == 1
    assert [c.precondition_fingerprint for c in _confirmations(engine, run_id)] == [before, after]
    assert _outcome_codes(engine, run_id) == ["PRECONDITION_CHANGED", None]


def test_an_approval_from_a_page_that_showed_the_old_state_is_refused(
    client, engine, worker, tmp_path
) -> None:
    # The re-ask keeps the proposal's hash; only the state differs. A person whose page still
    # shows the old state must not approve the new one without seeing it.
    from warrant.runner.errors import ConfirmationRefused

    run_id, acct, ledger, request = _start(client, tmp_path, cite="tool-2")
    before = request["precondition"]["fingerprint"]
    move(acct, balance_cents=700)
    client.confirm(run_id, proposal_hash=request["proposal_hash"], by="bob", precondition=before)
    asked = client.wait(run_id, timeout=30, until=WAITING).confirmation_request
    after = asked["precondition"]["fingerprint"]
    with pytest.raises(ConfirmationRefused) as stale:
        client.confirm(
            run_id, proposal_hash=asked["proposal_hash"], by="carol", precondition=before
        )
    assert stale.value.code == "PRECONDITION_CHANGED"
    assert client.get_run(run_id).confirmation_request["approved_by"] == []
    assert withdrawn(ledger) == 0
    client.confirm(run_id, proposal_hash=asked["proposal_hash"], by="carol", precondition=after)
    info = client.wait(run_id, timeout=30)
    assert (info.status, withdrawn(ledger)) == ("completed", 1), info


def test_a_failed_read_before_the_call_fails_closed(client, engine, worker, tmp_path) -> None:
    run_id, acct, ledger, request = _start(client, tmp_path, cite="tool-1")
    move(acct, down=True)
    client.confirm(run_id, proposal_hash=request["proposal_hash"], by="bob")
    info = client.wait(run_id, timeout=30)
    assert info.status not in ("running", "waiting_confirmation"), info
    assert withdrawn(ledger) == 0
    codes = _outcome_codes(engine, run_id)
    assert codes and set(codes) == {"PRECONDITION_UNREADABLE"}
    assert len(facts.events(engine, run_id, "precondition.unreadable")) == len(codes)
    assert not facts.events(engine, run_id, "precondition.checked")


def test_run_show_prints_the_state_the_approver_is_asked_about(
    client, engine, worker, tmp_path
) -> None:
    run_id, _, _, request = _start(client, tmp_path, cite="tool-1")
    shown = warrant("run", "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)["confirmation_request"]["precondition"]
    assert data == request["precondition"]
    table = warrant("run", "show", run_id)
    assert request["precondition"]["fingerprint"][:16] in table.stdout
    assert "balance_cents" in table.stdout


def test_the_inbox_shows_the_state_the_approver_approves(client, engine, worker, tmp_path) -> None:
    from warrant.runner.server.web.views import fragment

    run_id, _, _, request = _start(client, tmp_path, cite="tool-1")
    [pending] = [
        p for p in client.pending_confirmations(reveal_sensitive=True) if p.run_id == run_id
    ]
    assert pending.precondition == request["precondition"]
    html = fragment("_inbox.html", {"items": [pending], "may_confirm": True})
    assert "The state you approve" in html and "balance_cents" in html
    assert request["precondition"]["fingerprint"][:16] in html
    # the approve form carries the state it showed: a moved one is refused, not approved unseen
    fingerprint = request["precondition"]["fingerprint"]
    assert f'name="precondition" value="{fingerprint}"' in html
