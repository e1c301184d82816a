"""A caller that runs its own loop proposes one step at a time (planner kind ``external``):
the same gate, tool queue, ledger and reconciler as a planner's, on real workers."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_reconciler import notice, settle
from tests.integration.test_tool_execution import DRAFTS, LOOKUP, draft, lookup, uid
from warrant.runner.errors import InvalidRequest, StateConflict

pytestmark = [pytest.mark.services, pytest.mark.slow]

NOTICES = {"capability": "notices:send"}


def external_spec(*, grants=(LOOKUP, DRAFTS, NOTICES), **budgets) -> dict:
    spec = sc.spec([], grants=list(grants), **budgets)
    spec["planner"] = {"kind": "external", "agent": "tests"}
    return spec


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


def test_a_read_executes_and_a_final_answer_completes(client, engine, worker):
    run_id = client.start_run(external_spec())
    decision = client.propose(run_id, lookup("order 7"), by="agent-1", wait_s=20)
    assert (decision.step, decision.state, decision.outcome) == (1, "executed", "succeeded")
    assert decision.observation_id == "tool-1" and decision.output["query"] == "order 7"
    done = client.propose(run_id, sc.final("Found it.", "tool-1"), by="agent-1", wait_s=20)
    assert (done.state, done.answer, done.run_status) == ("completed", "Found it.", "completed")
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason, info.model_calls) == (
        "completed",
        "FINAL_ANSWER_VALIDATED",
        2,
    )
    submitted = facts.events(engine, run_id, "proposal.submitted")
    assert [e.details["by"] for e in submitted] == ["agent-1", "agent-1"]
    with pytest.raises(StateConflict) as err:
        client.propose(run_id, lookup(), by="agent-1")
    assert err.value.code == "RUN_FINISHED"


def test_a_callers_escalation_hands_the_run_to_a_person(client, engine, worker):
    run_id = client.start_run(external_spec())
    assert client.propose(run_id, lookup("order 7"), by="agent-1", wait_s=20).state == "executed"
    escalate = {"kind": "escalate", "reason": "the records say nothing of order 7"}
    decision = client.propose(run_id, escalate, by="agent-1", wait_s=20)
    assert (decision.state, decision.code) == ("stopped", "EVIDENCE_INSUFFICIENT")
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason, info.step) == ("handoff", "EVIDENCE_INSUFFICIENT", 2)
    [handoff] = [h for h in client.handoffs() if h["run_id"] == run_id]
    bundle = client.handoff(handoff["handoff_id"])["bundle"]
    [made] = bundle["artifacts"]
    assert made["tool"] == "lookup" and made["step"] == 1
    assert bundle["escalated"]["planner_said"] == escalate["reason"]
    assert len(facts.events(engine, run_id, "planner.escalated")) == 1


def test_a_call_outside_the_grants_is_refused_with_its_code(client, worker):
    run_id = client.start_run(external_spec(grants=[LOOKUP]))
    decision = client.propose(run_id, draft(uid("d")), by="agent", wait_s=20)
    assert (decision.state, decision.code) == ("refused", "MISSING_CAPABILITY")
    assert decision.message and decision.outcome is None
    # the run goes on: the next proposal is step 2
    again = client.propose(run_id, lookup(pid="p2"), by="agent", wait_s=20)
    assert (again.step, again.state, again.outcome) == (2, "executed", "succeeded")


def test_a_write_waits_for_the_exact_hash_and_runs_once(client, demo, worker, draft_worker):
    run_id = client.start_run(external_spec())
    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    waiting = client.propose(run_id, notice(recipient), by="agent", wait_s=20)
    assert waiting.state == "awaiting_confirmation" and waiting.proposal_hash
    assert waiting.confirmation["proposal_hash"] == waiting.proposal_hash
    # one proposal at a time: the next is refused while this one waits
    with pytest.raises(StateConflict) as err:
        client.propose(run_id, lookup(pid="p2"), by="agent")
    assert err.value.code == "PROPOSAL_IN_FLIGHT"
    # a retry of the same step replays it: no second step
    replay = client.propose(run_id, notice(recipient), by="agent", step=1)
    assert (replay.step, replay.state) == (1, "awaiting_confirmation")
    client.confirm(run_id, proposal_hash=waiting.proposal_hash, by="alice")
    done = client.decision(run_id, 1, wait_s=20, seen="awaiting_confirmation")
    if done.state == "pending":
        done = client.decision(run_id, 1, wait_s=20)
    assert (done.state, done.outcome) == ("executed", "succeeded"), done
    assert demo.notice_count(recipient=recipient) == 1
    assert client.get_run(run_id).step == 1


def test_an_unknown_effect_is_reported_unknown_then_reconciled(
    client, demo, worker, draft_worker, reconciler_worker
):
    run_id = client.start_run(external_spec())
    demo.set_fault("save_draft", "timeout_after_commit")
    draft_id = uid("d")
    decision = client.propose(run_id, draft(draft_id), by="agent", wait_s=20)
    assert (decision.state, decision.outcome) == ("executed", "unknown"), decision
    # the session's reconciler may already be at it: reconciling, or back to running
    assert decision.run_status in ("reconciling", "running"), decision
    assert decision.resolved in (None, "applied"), decision
    settle(client, run_id, until=("running",))
    resolved = client.decision(run_id, 1)
    assert resolved.resolved == "applied"
    assert demo.draft_count(draft_id=draft_id) == 1
    nxt = client.propose(run_id, sc.final("Saved.", "tool-1"), by="agent", wait_s=20)
    assert nxt.state == "completed"


def test_bad_input_and_runs_with_their_own_planner_are_refused(client, worker):
    own = client.start_run(sc.spec([sc.final("x", "tool-1")]))
    with pytest.raises(StateConflict) as err:
        client.propose(own, lookup(), by="agent")
    assert err.value.code == "RUN_NOT_EXTERNAL"
    run_id = client.start_run(external_spec())
    with pytest.raises(InvalidRequest) as bad:
        client.propose(run_id, ["not", "an", "object"], by="agent")  # type: ignore[arg-type]
    assert bad.value.code == "PROPOSAL_INVALID"
    deep: object = "x"
    for _ in range(5_000):  # past the gate's bound and Python's recursion limit
        deep = [deep]
    for hostile, code in (
        ({"q": deep}, "PROPOSAL_TOO_DEEP"),
        ({"q": float("nan")}, "PROPOSAL_INVALID"),
    ):
        with pytest.raises(InvalidRequest) as bad:
            client.propose(run_id, {**lookup(), "arguments": hostile}, by="agent")
        assert bad.value.code == code  # refused before anything was recorded: still step 0
    assert client.get_run(run_id).step == 0
    with pytest.raises(StateConflict) as mismatch:
        client.propose(run_id, lookup(), by="agent", step=3)
    assert mismatch.value.code == "STEP_MISMATCH"
    garbage = client.propose(run_id, {"kind": "tool", "tool": "lookup"}, by="agent", wait_s=20)
    assert garbage.state == "refused" and garbage.code, garbage


def test_budgets_apply_to_external_proposals(client, worker):
    run_id = client.start_run(external_spec(max_steps=1))
    first = client.propose(run_id, lookup(), by="agent", wait_s=20)
    assert first.state == "executed"
    # the step budget is spent: the planner worker's check (on the run's next message) or
    # this submission's stops the run, whichever comes first; never a second step
    try:
        stopped = client.propose(run_id, lookup(pid="p2"), by="agent")
        assert (stopped.state, stopped.code) == ("stopped", "MAX_STEPS_REACHED")
    except StateConflict as err:
        assert err.code == "RUN_FINISHED" and "MAX_STEPS_REACHED" in str(err)
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason, info.step) == ("failed", "MAX_STEPS_REACHED", 1)


def test_the_cli_proposes_and_reads_decisions(client, worker, tmp_path):
    import json

    from tests.integration.test_cli import warrant

    run_id = client.start_run(external_spec())
    out = warrant(
        "run", "propose", run_id, "-", "--by", "cli", "--json", stdin=json.dumps(lookup())
    )
    assert out.returncode == 0, out.stderr
    decided = json.loads(out.stdout)
    assert (decided["step"], decided["state"], decided["outcome"]) == (1, "executed", "succeeded")
    shown = json.loads(warrant("run", "decision", run_id, "1", "--json").stdout)
    assert shown["observation_id"] == "tool-1" and shown["settled"] is True
    again = warrant("run", "propose", run_id, "-", "--by", "cli", "--json", stdin="{nope")
    assert again.returncode == 2 and json.loads(again.stdout)["error"]["code"] == "PROPOSAL_INVALID"
    missing = warrant("mcp", "serve", "--spec", str(tmp_path / "none.json"), "--json")
    assert missing.returncode == 2, missing.stderr
    assert json.loads(missing.stdout)["error"]["code"] == "SPEC_INVALID"


def test_loop_detection_refuses_a_callers_repeated_call(client, engine, worker):
    """Experiment 2 with the caller as the planner: the same search again and again. An
    agent's own loop is refused the repeat (a code it sees) and goes on (issue 50)."""
    run_id = client.start_run(external_spec(grants=[sc.SEARCH_GRANT], max_tool_calls=5))
    decisions = [
        client.propose(run_id, sc.search(f"p{i}"), by="agent", wait_s=20) for i in range(5)
    ]
    assert [d.state for d in decisions] == [
        "executed",
        "executed",
        "executed",
        "refused",  # its answer is known: refused, the run goes on
        "executed",  # the refusal was a new observation
    ]
    assert decisions[3].code == "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    info = client.get_run(run_id)
    assert (info.status, info.tool_calls) == ("running", 4)
    assert len(facts.events(engine, run_id, "proposal.loop_detected")) == 1

    stopping = client.start_run(
        external_spec(grants=[sc.SEARCH_GRANT], max_tool_calls=5, on_loop="stop")
    )
    states = [
        client.propose(stopping, sc.search(f"p{i}"), by="agent", wait_s=20).state for i in range(4)
    ]
    assert states == ["executed", "executed", "executed", "stopped"]  # the spec asked for it
    assert client.get_run(stopping).status == "failed"


# --- issue 50: an agent's session on its defaults --------------------------------------------

TEMPLATE = {  # what an operator writes for `warrant mcp serve --spec`: only the step budget
    "goal": "Help the user through their agent.",
    "subject": "session-user",
    "grants": [LOOKUP, DRAFTS, NOTICES],
    "budgets": {"max_steps": 20},
}


def _as_if_asked_long_ago(engine, run_id: str, *, waited_s: float) -> None:
    """Five minutes with a person without waiting them: the request was asked ``waited_s``
    ago and the run's deadline has passed meanwhile (the wall-clock deadline ran out while a
    person looked)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE proposals SET confirmation_request = confirmation_request"
                " || jsonb_build_object('asked_at', extract(epoch from now()) - :waited,"
                " 'expires_at', extract(epoch from now()) - :waited + 900)"
                " WHERE id = (SELECT pending_proposal_id FROM runs WHERE id = :id)"
            ),
            {"id": run_id, "waited": waited_s},
        )
        conn.execute(
            text("UPDATE runs SET deadline_at = now() - interval '1 second' WHERE id = :id"),
            {"id": run_id},
        )


def test_a_session_on_the_template_defaults_reads_repeats_and_waits_for_a_person(
    client, engine, demo, worker, draft_worker
):
    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import sweep

    run_id = client.start_run({**TEMPLATE, "planner": {"kind": "external", "agent": "tests"}})
    with engine.connect() as conn:
        budgets = conn.execute(
            text("SELECT spec -> 'budgets' FROM runs WHERE id = :id"), {"id": run_id}
        ).scalar_one()
    assert (budgets["max_model_calls"], budgets["max_tool_calls"]) == (None, 40)
    assert (budgets["deadline_s"], budgets["on_loop"]) == (3600, "refuse")
    # 19 reads (the 20th step is the write), one of them an exact repeat of an earlier one
    queries = [f"order {i}" for i in range(1, 19)] + ["order 3"]
    for step, query in enumerate(queries, start=1):
        read = client.propose(run_id, lookup(query, pid=f"r{step}"), by="agent", wait_s=20)
        assert (read.step, read.state, read.outcome) == (step, "executed", "succeeded"), read
    assert client.get_run(run_id).status == "running"

    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    waiting = client.propose(run_id, notice(recipient, pid="w"), by="agent", wait_s=20)
    assert (waiting.step, waiting.state) == (20, "awaiting_confirmation"), waiting
    _as_if_asked_long_ago(engine, run_id, waited_s=300)
    sweep(context_for(engine, publisher=RecordingPublisher()))
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason) == ("waiting_confirmation", "USER_CONFIRMATION_REQUIRED")

    client.confirm(run_id, proposal_hash=waiting.proposal_hash, by="alice")
    done = client.decision(run_id, 20, wait_s=20, seen="awaiting_confirmation")
    if done.state == "pending":
        done = client.decision(run_id, 20, wait_s=20)
    assert (done.state, done.outcome) == ("executed", "succeeded"), done
    assert demo.notice_count(recipient=recipient) == 1
    (approved,) = facts.events(engine, run_id, "confirmation.approved")
    assert approved.details["deadline_moved_s"] >= 300
    with engine.connect() as conn:
        left = conn.execute(
            text("SELECT extract(epoch from deadline_at - now()) FROM runs WHERE id = :id"),
            {"id": run_id},
        ).scalar_one()
    assert left > 250  # the deadline moved on by the five minutes waited
    # the twenty steps are what ended the session, nothing else: not a loop, not the deadline
    info = settle(client, run_id, until=("failed",))
    assert (info.tool_calls, info.stop_reason) == (20, "MAX_STEPS_REACHED")


def test_a_callers_key_is_its_step_across_clients_and_after_the_run_ended(client, engine, worker):
    """A caller's key (issue 50): the same key again, from another client process and after
    the run ended, returns the step it named; the same key with another call is refused;
    neither makes a second command."""
    from warrant.runner.client.api import Client

    run_id = client.start_run(external_spec())
    first = client.propose(run_id, lookup("order 5", pid="a"), by="agent", wait_s=20, call_id="k1")
    assert (first.step, first.state, first.outcome) == (1, "executed", "succeeded"), first
    restarted = Client(engine=client.engine, publisher=client.publisher)  # another process
    again = restarted.propose(run_id, lookup("order 5", pid="b"), by="agent", call_id="k1")
    assert (again.step, again.state, again.observation_id) == (1, "executed", "tool-1")
    with pytest.raises(StateConflict) as caught:
        restarted.propose(run_id, lookup("order 6", pid="c"), by="agent", call_id="k1")
    assert caught.value.code == "IDEMPOTENCY_KEY_REUSED"
    assert (facts.commands(engine, run_id), client.get_run(run_id).step) == (1, 1)
    done = client.propose(run_id, sc.final("Found.", "tool-1"), by="agent", wait_s=20)
    assert done.run_status == "completed"
    late = restarted.propose(run_id, lookup("order 5", pid="d"), by="agent", call_id="k1")
    assert (late.step, late.outcome) == (1, "succeeded")  # not RUN_FINISHED: its own answer
    with pytest.raises(InvalidRequest) as bad:
        client.propose(run_id, lookup("order 5"), by="agent", call_id="")
    assert bad.value.code == "CALL_ID_INVALID"
