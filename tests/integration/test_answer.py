"""A clarifying question is answered and the run goes on (``needs_input`` is not an end)."""

from __future__ import annotations

import json

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_cli import warrant
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
    assert {"from": "needs_input", "to": "running"} in moved
    with pytest.raises(StateConflict) as err:
        client.answer(run_id, text="again", by="alice")
    assert err.value.code == "RUN_NOT_WAITING_INPUT"


def test_a_run_waiting_for_an_answer_can_be_cancelled(client, worker):
    run_id = client.start_run(sc.spec([CLARIFY]))
    assert client.wait(run_id, timeout=30).status == "needs_input"
    info = client.cancel(run_id, by="ops")
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")
