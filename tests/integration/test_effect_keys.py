"""A business effect key (``Tool.effect_key``; issue 50): an agent that lost a refund's reply and
proposes the same refund again (a new proposal, so a new command and token) is refused
``DUPLICATE_EFFECT`` with the earlier outcome, unless it asks to repeat the effect and a person
confirms. On real workers, PostgreSQL and Redis; the payment service is the demo's, whose
refunds are counted."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select, text
from warrant_demo import scenarios as sc

from tests.effect_tool import REFUND_DAILY
from tests.integration.test_reconciler import pre_approved, settle
from tests.integration.test_tool_execution import REFUND, refund
from warrant.broker.policy.stage import effects_still
from warrant.ledger.db import session_scope
from warrant.ledger.effect_keys import EffectMoved, effects_for
from warrant.ledger.models import Command, Proposal

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


def _order() -> str:
    return f"ord_{uuid.uuid4().hex[:12]}"


def _external(**extra: Any) -> dict[str, Any]:
    spec = sc.spec([], grants=[REFUND], max_tool_calls=10)
    spec["planner"] = {"kind": "external", "agent": "tests"}
    return {**spec, **extra}


def _daily(order: str, pid: str = "p1") -> dict[str, Any]:
    """A refund of ``refund_daily`` (tests/effect_tool.py: its key counts across runs)."""
    return {**refund(order, pid=pid), "tool": "refund_daily"}


def _commands(engine: Any, run_id: str) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(select(Command).where(Command.run_id == run_id).order_by(Command.step))
        )


def _proposal(engine: Any, run_id: str, step: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            select(Proposal).where(Proposal.run_id == run_id, Proposal.step == step)
        ).one()


def _refused_as_duplicate(decision: Any, *, run_id: str, step: int, status: str) -> dict:
    assert (decision.state, decision.code) == ("refused", "DUPLICATE_EFFECT"), decision
    earlier = decision.earlier
    assert earlier is not None, decision
    assert (earlier["run_id"], earlier["step"], earlier["status"]) == (run_id, step, status)
    assert decision.message and status in decision.message and "repeat_effect" in decision.message
    return dict(earlier)


def test_the_same_refund_again_is_refused_with_the_earlier_outcome(
    client, engine, demo, worker, draft_worker
):
    order = _order()
    run_id = client.start_run(_external())
    first = client.propose(run_id, refund(order, pid="r1"), by="agent", wait_s=20)
    assert (first.state, first.outcome) == ("executed", "succeeded"), first
    # the reply was "lost": the agent proposes the same refund again, as a new proposal
    again = client.propose(run_id, refund(order, pid="r2"), by="agent", wait_s=20)
    earlier = _refused_as_duplicate(again, run_id=run_id, step=1, status="succeeded")
    assert earlier["same_run"] is True and earlier["observation_id"] == "tool-1"
    assert demo.refund_count(order_id=order) == 1  # ONE refund
    [command] = _commands(engine, run_id)
    assert (command.step, command.effect_key) == (1, f"refund:{order}")
    assert earlier["command_id"] == command.id
    refused = _proposal(engine, run_id, 2)
    assert (refused.status, refused.rejection_code) == ("rejected", "DUPLICATE_EFFECT")
    # the run goes on: another order is another effect
    other = _order()
    nxt = client.propose(run_id, refund(other, pid="r3"), by="agent", wait_s=20)
    assert (nxt.step, nxt.state, nxt.outcome) == (3, "executed", "succeeded"), nxt
    assert demo.refund_count(order_id=other) == 1


def test_a_repeat_waits_for_a_person_and_then_refunds_again(
    client, engine, demo, worker, draft_worker
):
    order = _order()
    run_id = client.start_run(_external())
    first = client.propose(run_id, refund(order, pid="r1"), by="agent", wait_s=20)
    assert first.outcome == "succeeded", first
    refused = client.propose(run_id, refund(order, pid="r2"), by="agent", wait_s=20)
    _refused_as_duplicate(refused, run_id=run_id, step=1, status="succeeded")
    # the agent means it: repeat_effect asks a person (issue_refund is relaxed in the test
    # deployment, so without it no person would be asked)
    repeat = {**refund(order, pid="r3"), "repeat_effect": True}
    waiting = client.propose(run_id, repeat, by="agent", wait_s=20)
    assert waiting.state == "awaiting_confirmation", waiting
    assert waiting.confirmation["repeats"]["step"] == 1
    assert waiting.confirmation["repeats"]["status"] == "succeeded"
    assert demo.refund_count(order_id=order) == 1  # nothing before the person says so
    client.confirm(run_id, proposal_hash=waiting.proposal_hash, by="alice")
    done = client.decision(run_id, 3, wait_s=20, seen="awaiting_confirmation")
    if done.state == "pending":
        done = client.decision(run_id, 3, wait_s=20)
    assert (done.state, done.outcome) == ("executed", "succeeded"), done
    assert demo.refund_count(order_id=order) == 2  # the second refund, confirmed
    commands = _commands(engine, run_id)
    assert [(c.step, c.effect_key) for c in commands] == [
        (1, f"refund:{order}"),
        (3, f"refund:{order}"),
    ]
    assert commands[0].confirmation_id is None and commands[1].confirmation_id is not None
    # and a third, unasked, is refused again: the repeat is now the earlier effect
    third = client.propose(run_id, refund(order, pid="r4"), by="agent", wait_s=20)
    _refused_as_duplicate(third, run_id=run_id, step=3, status="succeeded")
    assert demo.refund_count(order_id=order) == 2


def test_a_failed_or_refused_earlier_refund_does_not_block(
    client, engine, demo, worker, draft_worker
):
    """The service refuses the refund (``ToolRejected``: the run goes on) and the same refund
    proposed again runs; a refund that failed for good (its run failed) does not block another
    run within the window either."""
    order = _order()
    run_id = client.start_run(_external())
    demo.set_fault("issue_refund", "reject")
    refused = client.propose(run_id, refund(order, pid="r1"), by="agent", wait_s=20)
    assert (refused.state, refused.outcome) == ("executed", "rejected"), refused
    retried = client.propose(run_id, refund(order, pid="r2"), by="agent", wait_s=20)
    assert (retried.state, retried.outcome) == ("executed", "succeeded"), retried
    assert demo.refund_count(order_id=order) == 1
    assert [c.effect_key for c in _commands(engine, run_id)] == [f"refund:{order}"] * 2
    other = _order()
    demo.set_fault("issue_refund", "fail")
    first = client.start_run(_external(pre_approved=[pre_approved(_daily(other))]))
    failed = client.propose(first, _daily(other), by="agent", wait_s=20)
    assert (failed.state, failed.outcome) == ("executed", "failed"), failed
    second = client.start_run(_external(pre_approved=[pre_approved(_daily(other))]))
    done = client.propose(second, _daily(other), by="agent", wait_s=20)
    assert (done.state, done.outcome) == ("executed", "succeeded"), done
    assert demo.refund_count(order_id=other) == 1


def test_an_unknown_earlier_refund_blocks(
    client, engine, demo, worker, draft_worker, reconciler_worker
):
    """The refund's reply is lost (committed, then a timeout): its effect is unknown until the
    reconciler finds it applied; the same refund afterwards is refused, naming it unknown."""
    order = _order()
    run_id = client.start_run(_external())
    demo.set_fault("issue_refund", "timeout_after_commit")
    lost = client.propose(run_id, refund(order, pid="r1"), by="agent", wait_s=20)
    assert (lost.state, lost.outcome) == ("executed", "unknown"), lost
    settle(client, run_id, until=("running",))
    again = client.propose(run_id, refund(order, pid="r2"), by="agent", wait_s=20)
    earlier = _refused_as_duplicate(again, run_id=run_id, step=1, status="unknown")
    assert earlier["resolved"] == "applied"
    assert demo.refund_count(order_id=order) == 1


def test_across_runs_within_the_window_and_not_outside_it(client, engine, demo, worker):
    order = _order()
    grants = [REFUND]
    first = client.start_run(_external(grants=grants, pre_approved=[pre_approved(_daily(order))]))
    done = client.propose(first, _daily(order), by="agent", wait_s=20)
    assert (done.state, done.outcome) == ("executed", "succeeded"), done
    # another run, within the tool's hour: refused, naming the first run's refund
    second = client.start_run(_external(grants=grants, pre_approved=[pre_approved(_daily(order))]))
    refused = client.propose(second, _daily(order), by="agent", wait_s=20)
    earlier = _refused_as_duplicate(refused, run_id=first, step=1, status="succeeded")
    assert earlier["same_run"] is False
    assert demo.refund_count(order_id=order) == 1
    assert _commands(engine, second) == []
    # the first run's refund ages past the window (its issue time moved back two hours)
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE commands SET created_at = created_at - interval '2 hours' "
                "WHERE run_id = :run_id"
            ),
            {"run_id": first},
        )
    third = client.start_run(_external(grants=grants, pre_approved=[pre_approved(_daily(order))]))
    later = client.propose(third, _daily(order), by="agent", wait_s=20)
    assert (later.state, later.outcome) == ("executed", "succeeded"), later
    assert demo.refund_count(order_id=order) == 2
    # the demo's issue_refund (window 0) compares within its run only
    plain = client.start_run(_external())
    own = client.propose(plain, refund(order), by="agent", wait_s=20)
    assert (own.state, own.outcome) == ("executed", "succeeded"), own


def test_an_unknown_effect_in_another_run_blocks(client, engine, demo, worker):
    """No reconciler is needed: the other run's refund is unknown (perhaps resolved by a
    reconciler of the session meanwhile, then found applied); either way it blocks."""
    order = _order()
    demo.set_fault("issue_refund", "timeout_after_commit")
    first = client.start_run(_external(pre_approved=[pre_approved(_daily(order))]))
    lost = client.propose(first, _daily(order), by="agent", wait_s=20)
    assert (lost.state, lost.outcome) == ("executed", "unknown"), lost
    second = client.start_run(_external(pre_approved=[pre_approved(_daily(order))]))
    refused = client.propose(second, _daily(order), by="agent", wait_s=20)
    earlier = _refused_as_duplicate(refused, run_id=first, step=1, status="unknown")
    assert earlier.get("resolved") in (None, "applied")
    assert demo.refund_count(order_id=order) == 1


def test_two_refunds_of_one_order_in_one_parallel_step(client, engine, demo, worker, draft_worker):
    order = _order()
    calls = [
        {**refund(order, pid="a"), "arguments": {**refund(order)["arguments"], "amount_cents": n}}
        for n in (100, 200)
    ]
    step = {"kind": "parallel", "proposal_id": "both", "calls": calls, "merge": "any"}
    run_id = client.start_run(sc.spec([step, sc.final("Refunded.", "tool-1.1")], grants=[REFUND]))
    info = client.wait(run_id, timeout=30)
    assert info.status == "completed", info
    assert demo.refund_count(order_id=order) == 1
    assert [(c.branch, c.effect_key) for c in _commands(engine, run_id)] == [(1, f"refund:{order}")]
    with engine.connect() as conn:
        branches = conn.execute(
            select(Proposal.branch, Proposal.status, Proposal.rejection_code)
            .where(Proposal.run_id == run_id, Proposal.branch > 0)
            .order_by(Proposal.branch)
        ).all()
    assert [tuple(b) for b in branches] == [
        (1, "accepted", None),
        (2, "rejected", "DUPLICATE_EFFECT"),
    ]


def test_a_key_written_after_the_load_makes_the_write_decide_again(client, engine, demo, worker):
    """Two policy workers of two runs decide one key at once: the write takes the key's
    advisory lock (another transaction cannot) and reads again; a command the decision did
    not see raises ``EffectMoved`` (the stage then decides again), one it saw does not."""
    order = _order()
    first = client.start_run(_external(pre_approved=[pre_approved(_daily(order))]))
    done = client.propose(first, _daily(order), by="agent", wait_s=20)
    assert done.outcome == "succeeded", done
    key = f"refund:{order}"
    accepted = SimpleNamespace(effect_key=key, tool=REFUND_DAILY)
    view = SimpleNamespace(run_id=str(uuid.uuid4()))  # the other run, deciding
    stale = SimpleNamespace(effects=[])  # its load predates the first run's command
    with session_scope(engine) as s:
        with pytest.raises(EffectMoved):
            effects_still(s, view, stale, [accepted])
        with engine.connect() as other:  # the lock is held until the transaction ends
            taken = other.execute(
                text("SELECT pg_try_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": key}
            ).scalar()
            assert taken is False
    with session_scope(engine) as s:
        fresh = SimpleNamespace(
            effects=effects_for(s, view.run_id, [key], REFUND_DAILY.effect_window_s)
        )
        assert [e.run_id for e in fresh.effects] == [first]
        effects_still(s, view, fresh, [accepted])  # nothing new: the write goes ahead
