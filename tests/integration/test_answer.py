"""A clarifying question is answered and the run goes on (``needs_input`` is not an end)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import booking_tool as booking
from tests import facts
from tests.integration.test_cli import warrant
from warrant.ledger.db import session_scope
from warrant.ledger.models import OutcomeRow
from warrant.runner.errors import StateConflict

pytestmark = [pytest.mark.services, pytest.mark.slow]

CLARIFY = {"kind": "clarify", "question": "Which service do you mean?"}


def test_an_answered_question_lets_the_run_go_on(engine, client, worker):
    spec = sc.spec([CLARIFY, sc.search("p2"), sc.final("Three.", "tool-2")])
    run_id = client.start_run(spec)
    asked = client.wait(run_id, timeout=30)
    assert (asked.status, asked.stop_reason, asked.answer) == (
        "needs_input",
        "CLARIFICATION_REQUIRED",
        "Which service do you mean?",
    )
    out = warrant("run", "answer", run_id, "--text", "The payments API.", "--by", "alice", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] in ("running", "completed")
    done = client.wait(run_id, timeout=30)
    assert (done.status, done.answer) == ("completed", "Three."), done
    obs = {o["observation_id"]: o for o in client.observations(run_id)}
    assert obs["answer-1"]["source"] == "user"
    assert obs["answer-1"]["content"] == {"answer": "The payments API.", "by": "alice"}
    [answered] = facts.events(engine, run_id, "clarification.answered")
    assert answered.details["by"] == "alice"
    moved = [e.details for e in facts.events(engine, run_id, "state.transitioned")]
    assert ("needs_input", "running") in [(d["from"], d["to"]) for d in moved]
    with pytest.raises(StateConflict) as err:
        client.answer(run_id, text="again", by="alice")
    assert err.value.code == "RUN_NOT_WAITING_INPUT"


def test_a_run_waiting_for_an_answer_can_be_cancelled(client, worker):
    run_id = client.start_run(sc.spec([CLARIFY]))
    assert client.wait(run_id, timeout=30).status == "needs_input"
    info = client.cancel(run_id, by="ops")
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")


# --- a tool's declared business errors (``Tool.errors``; issue 54) ------------------------------


def _outcomes(engine, run_id: str) -> list[tuple[str, str | None]]:
    with session_scope(engine) as s:
        q = select(OutcomeRow.status, OutcomeRow.code).where(OutcomeRow.run_id == run_id)
        return [(row[0], row[1]) for row in s.execute(q.order_by(OutcomeRow.id))]


def test_a_declared_ask_user_refusal_asks_the_user_and_the_answer_lets_the_run_go_on(
    engine, client, worker, tmp_path
):
    service, ledger = booking.service(tmp_path / "svc.json", c_1=3), tmp_path / "bookings"
    spec = sc.spec(
        [
            booking.proposal("b1", service, ledger, "c-1", 5),  # over the quota of 3
            booking.proposal("b2", service, ledger, "c-1", 3),  # what the user's answer says
            sc.final("Booked 3.", "tool-2"),
        ],
        grants=[{"capability": booking.CAPABILITY}],
    )
    run_id = client.start_run(spec)
    asked = client.wait(run_id, timeout=30)
    assert (asked.status, asked.stop_reason) == ("needs_input", "CLARIFICATION_REQUIRED"), asked
    assert "book_seats" in asked.answer and "QUOTA_EXCEEDED" in asked.answer
    assert "customer c-1 has 3 of 3 seats left" in asked.answer  # the tool's own words
    assert _outcomes(engine, run_id) == [("rejected", "QUOTA_EXCEEDED")]
    assert booking.bookings(ledger) == []  # no effect
    assert not facts.events(engine, run_id, "proposal.rejected")  # not re-planned
    out = warrant("run", "answer", run_id, "--text", "Book 3 then.", "--by", "alice", "--json")
    assert out.returncode == 0, out.stderr
    done = client.wait(run_id, timeout=30)
    assert (done.status, done.answer) == ("completed", "Booked 3."), done
    assert booking.bookings(ledger) == ["c-1 3"]
    assert _outcomes(engine, run_id) == [("rejected", "QUOTA_EXCEEDED"), ("succeeded", None)]
    obs = {o["observation_id"]: o for o in client.observations(run_id)}
    assert obs["tool-1"]["content"]["code"] == "QUOTA_EXCEEDED"
    assert obs["answer-1"]["source"] == "user"
    assert obs["answer-1"]["content"] == {"answer": "Book 3 then.", "by": "alice"}


def test_a_declared_replan_refusal_before_the_call_goes_back_to_the_planner(
    engine, client, worker, tmp_path
):
    # ``precheck`` reads the service through the tool's deps before the call: an unknown
    # customer is refused there (declared ``replan``), nothing is booked, the planner goes on.
    service, ledger = booking.service(tmp_path / "svc.json", c_1=3), tmp_path / "bookings"
    spec = sc.spec(
        [
            booking.proposal("b1", service, ledger, "c-404", 1),
            booking.proposal("b2", service, ledger, "c-1", 1),
            sc.final("Booked 1.", "tool-2"),
        ],
        grants=[{"capability": booking.CAPABILITY}],
    )
    run_id = client.start_run(spec)
    done = client.wait(run_id, timeout=30)
    assert (done.status, done.answer) == ("completed", "Booked 1."), done
    assert _outcomes(engine, run_id) == [("rejected", "CUSTOMER_NOT_FOUND"), ("succeeded", None)]
    assert booking.bookings(ledger) == ["c-1 1"]  # the refused call had no effect
    [refused] = facts.events(engine, run_id, "precheck.refused")
    assert (refused.details["tool"], refused.details["code"]) == (
        "book_seats",
        "CUSTOMER_NOT_FOUND",
    )
    moved = [e.details for e in facts.events(engine, run_id, "state.transitioned")]
    assert {"from": "running", "to": "needs_input"} not in moved
