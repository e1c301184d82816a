"""Refusals that ask (``policy.on_missing_grant: "ask"``): a proposal refused for a missing
grant pauses the run in ``waiting_grant``; an operator's grant sends the same proposal through
the gate again, with no new planner step."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select, text
from warrant_demo import scenarios as sc

from tests import facts
from warrant.ledger.models import Artifact, Command, Proposal

pytestmark = [pytest.mark.services, pytest.mark.slow]

CLARIFY = {"kind": "clarify", "question": "What now?"}


def write(path: str = "run-output/grant-wait.md", pid: str = "p1") -> dict:
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "write_artifact",
        "tool_version": "1",
        "arguments": {"path": path, "content": "hello"},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def asking(outputs: list[dict], **budgets) -> dict:
    spec = sc.spec(outputs, **budgets)
    spec["policy"] = {"on_missing_grant": "ask"}
    spec["subject"] = "grant-wait"
    return spec


def test_a_missing_grant_waits_and_a_grant_runs_the_same_proposal_once(engine, client, worker):
    run_id = client.start_run(asking([write(), sc.final("written", "tool-1")]))
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.stop_reason) == ("waiting_grant", "GRANT_REQUIRED")
    waiting = info.waiting_for_grant
    assert waiting["tool"] == "write_artifact"
    assert waiting["capability"] == "artifact:write"
    assert waiting["code"] == "MISSING_CAPABILITY"
    assert waiting["resources"] == ["run-output/grant-wait.md"]
    assert waiting["step"] == 1 and waiting["proposal_id"] == "p1"
    assert len(waiting["proposal_hash"]) == 64
    # nothing ran and the planner was asked once: one proposal row, no command
    assert (info.model_calls, facts.proposals(engine, run_id), facts.commands(engine, run_id)) == (
        1,
        1,
        0,
    )
    assert [r.run_id for r in client.list_runs(status="waiting_grant", limit=500)].count(run_id)
    # `warrant run list --status waiting_grant` reads the same without SQLAlchemy
    from warrant.ledger.run_listing import newest_runs

    listed = newest_runs(engine.url.render_as_string(False), limit=500, status="waiting_grant")
    [row] = [r for r in listed if r["run_id"] == run_id]
    assert row == client.get_run(run_id).to_dict() | {"pre_approvals": []}
    assert row["waiting_for_grant"]["capability"] == "artifact:write"

    # a grant that does not cover the resource: the same proposal is refused again, still waits
    client.add_grant(
        run_id, capability="artifact:write", resource_scope="reports/*", granted_by="ops"
    )
    info = _settled_after(client, run_id, info.version)
    assert info.status == "waiting_grant"
    assert info.waiting_for_grant["code"] == "RESOURCE_OUT_OF_SCOPE"
    assert info.waiting_for_grant["proposal_hash"] == waiting["proposal_hash"]
    assert (info.model_calls, facts.proposals(engine, run_id)) == (1, 1)

    # the run now holds reports/*: run-output/* widens it, an explicit act (issue 36 item 6)
    client.add_grant(
        run_id,
        capability="artifact:write",
        resource_scope="run-output/*",
        granted_by="ops",
        widen=True,
    )
    info = _settled_after(client, run_id, info.version)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.count(engine, Artifact, run_id=run_id) == 1
    with engine.connect() as conn:
        commands = conn.execute(
            select(Command.proposal_id, Command.step).where(Command.run_id == run_id)
        ).all()
        p1 = conn.execute(
            select(Proposal.proposal_hash, Proposal.status).where(
                Proposal.run_id == run_id, Proposal.proposal_id == "p1"
            )
        ).all()
    assert [tuple(c) for c in commands] == [("p1", 1)]
    assert [tuple(p) for p in p1] == [(waiting["proposal_hash"], "accepted")]
    assert info.model_calls == 2  # the write's step and the final answer: never re-planned
    added = facts.events(engine, run_id, "grant.added")
    assert [e.details["by"] for e in added] == ["ops", "ops"]
    assert len(facts.events(engine, run_id, "grant.requested")) == 2


def test_the_default_still_replans(engine, client, worker):
    spec = sc.spec([write(), CLARIFY])
    spec["subject"] = "grant-wait-default"
    info = client.wait(client.start_run(spec), timeout=30)
    assert info.status == "needs_input" and info.waiting_for_grant is None
    assert facts.rejection_codes(engine, info.run_id) == ["MISSING_CAPABILITY"]
    assert facts.events(engine, info.run_id, "grant.requested") == []
    assert info.model_calls == 2


def test_a_waiting_run_can_be_cancelled(client, worker):
    run_id = client.start_run(asking([write(), CLARIFY]))
    assert client.wait(run_id, timeout=30).status == "waiting_grant"
    info = client.cancel(run_id, by="ops")
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")


def test_a_waiting_run_past_its_deadline_stops(engine, client, worker):
    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import sweep

    run_id = client.start_run(asking([write(), CLARIFY]))
    assert client.wait(run_id, timeout=30).status == "waiting_grant"
    sweep(context_for(engine, publisher=RecordingPublisher()))
    assert client.get_run(run_id).status == "waiting_grant"  # not due yet
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET deadline_at = now() - interval '1 second' WHERE id = :id"),
            {"id": run_id},
        )
    sweep(context_for(engine, publisher=RecordingPublisher()))
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason) == ("failed", "DEADLINE_REACHED")
    # a budget stop says what was made (nothing ran) and its snapshot
    assert info.budget_stop is not None and info.budget_stop["artifacts"] == []
    assert info.budget_stop["effect"] == "none" and "deadline_at" in info.budget_stop["budget"]
    assert len(facts.events(engine, run_id, "grant.wait_expired")) == 1
    assert facts.commands(engine, run_id) == 0


def _settled_after(client, run_id: str, version: int, timeout: float = 30.0):
    """The run once its version has moved past ``version`` and it settled again."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        info = client.wait(run_id, timeout=max(0.5, end - time.monotonic()))
        if info.version > version:
            return info
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not move past version {version}")
