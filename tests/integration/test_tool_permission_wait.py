"""A tool's own permission refusal that asks (``policy.on_missing_grant: "ask"``): the external
system (tests/permission_tool.py: an access list and an idempotency memory in files) refuses
the call; the run waits in ``waiting_grant`` naming the capability and the resource the tool
gave; an operator fixes the access list and grants; the same proposal is checked again and its
command issued again with the same idempotency token (asked about first: the tool reconciles),
and the update is applied exactly once, also when the system applied it before it refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests import permission_tool as crm
from warrant.ledger.models import Command, OutcomeRow, Proposal

pytestmark = [pytest.mark.services, pytest.mark.slow]

CLARIFY = {"kind": "clarify", "question": "What now?"}


def crm_spec(record: str, outputs: list[dict], *, ask: bool) -> dict:
    spec = sc.spec(outputs, grants=[{"capability": crm.CAPABILITY, "resource_scope": "contacts/*"}])
    spec["goal"] = f"Update the phone number of contact {record}."
    spec["subject"] = "crm-permission"
    if ask:
        spec["policy"] = {"on_missing_grant": "ask"}
    return spec


def test_a_refusal_waits_and_after_the_grant_the_same_proposal_runs_once(engine, client, worker):
    record = f"c-{uuid.uuid4().hex[:12]}"
    outputs = [crm.proposal("p1", record), sc.final("updated", "tool-1")]
    run_id = client.start_run(crm_spec(record, outputs, ask=True))
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.stop_reason) == ("waiting_grant", "GRANT_REQUIRED")
    waiting = info.waiting_for_grant
    assert (waiting["source"], waiting["code"]) == ("tool", "TOOL_PERMISSION_DENIED")
    assert waiting["capability"] == crm.EXTERNAL_PERMISSION
    assert waiting["resources"] == [crm.resource_of(record)]
    assert (waiting["tool"], waiting["step"], waiting["proposal_id"]) == (
        "crm_update_contact",
        1,
        "p1",
    )
    assert waiting["attempt"] == 1 and "403" in waiting["message"]
    assert crm.effects(record) == [] and info.model_calls == 1
    # `warrant run show --json` (its own process, on the ledger) shows the same request
    shown = _run_show(run_id)
    assert shown["waiting_for_grant"] == waiting and shown["status"] == "waiting_grant"

    # a grant while the access list still refuses: checked again, refused again, waits again
    client.add_grant(
        run_id,
        capability=crm.EXTERNAL_PERMISSION,
        resource_scope=crm.resource_of(record),
        granted_by="ops",
    )
    info = _settled_after(client, run_id, info.version)
    assert info.status == "waiting_grant" and info.waiting_for_grant["attempt"] == 2
    assert crm.effects(record) == [] and info.model_calls == 1

    crm.allow(record)  # the operator fixes the access list in the external system...
    client.add_grant(  # ... and grants: the same proposal goes through the gate again
        run_id,
        capability=crm.EXTERNAL_PERMISSION,
        resource_scope=crm.resource_of(record),
        granted_by="ops",
    )
    info = _settled_after(client, run_id, info.version)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    [effect] = crm.effects(record)  # applied exactly once
    assert info.model_calls == 2  # the update's step and the final answer: never re-planned
    with engine.connect() as conn:
        commands = conn.execute(
            select(
                Command.id, Command.proposal_id, Command.attempts, Command.idempotency_token
            ).where(Command.run_id == run_id)
        ).all()
        outcomes = conn.execute(
            select(OutcomeRow.attempt, OutcomeRow.status, OutcomeRow.code)
            .where(OutcomeRow.run_id == run_id)
            .order_by(OutcomeRow.attempt)
        ).all()
        proposals = conn.execute(
            select(Proposal.proposal_id, Proposal.status)
            .where(Proposal.run_id == run_id)
            .order_by(Proposal.step)
        ).all()
    [(_, pid, attempts, token)] = commands  # one command, three attempts
    assert (pid, attempts) == ("p1", 3)
    assert [tuple(o) for o in outcomes] == [
        (1, "rejected", "TOOL_PERMISSION_DENIED"),
        (2, "rejected", "TOOL_PERMISSION_DENIED"),
        (3, "succeeded", None),
    ]
    assert effect.endswith(token)  # the update carried the command's one token
    keys = [e.details["idempotency_key_hash"] for e in facts.events(engine, run_id, "tool.started")]
    assert len(keys) == 3 and len(set(keys)) == 1  # the resumed command kept its token
    assert crm.calls(record) == [token] * 3  # the system saw one key, three times
    asked = facts.events(engine, run_id, "tool.reconciled_before_call")
    assert [e.details["applied"] for e in asked] == [False, False]  # asked before each retry
    assert len(facts.events(engine, run_id, "grant.requested")) == 2
    assert len(facts.events(engine, run_id, "grant.added")) == 2
    assert [p[0] for p in proposals] == ["p1", None]  # the update's and the final answer's
    assert proposals[0].status == "accepted"


def test_an_update_applied_before_the_refusal_is_reconciled_not_applied_again(
    engine, client, worker
):
    """The fault: the system applies the update, then answers 403. After the grant the
    command keeps its token, the tool is asked about it first, finds it applied, and that is
    the outcome: the system is not called again and the effect happened once."""
    record = f"c-{uuid.uuid4().hex[:12]}"
    crm.partial(record)
    outputs = [crm.proposal("p1", record), sc.final("updated", "tool-1")]
    run_id = client.start_run(crm_spec(record, outputs, ask=True))
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.waiting_for_grant["code"]) == (
        "waiting_grant",
        "TOOL_PERMISSION_DENIED",
    )
    assert len(crm.effects(record)) == 1  # applied although refused
    crm.allow(record)
    client.add_grant(  # any grant resumes a run its tool refused (here: warrant's own)
        run_id,
        capability=crm.CAPABILITY,
        resource_scope=crm.resource_of(record),
        granted_by="ops",
    )
    info = _settled_after(client, run_id, info.version)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    [effect] = crm.effects(record)  # once
    [token] = set(crm.calls(record))
    assert crm.calls(record) == [token] and effect.endswith(token)  # called once, not again
    [asked] = facts.events(engine, run_id, "tool.reconciled_before_call")
    assert (asked.details["tool"], asked.details["applied"]) == ("crm_update_contact", True)
    with engine.connect() as conn:
        outcomes = conn.execute(
            select(OutcomeRow.attempt, OutcomeRow.status, OutcomeRow.code, OutcomeRow.output)
            .where(OutcomeRow.run_id == run_id)
            .order_by(OutcomeRow.attempt)
        ).all()
    assert [tuple(o)[:3] for o in outcomes] == [
        (1, "rejected", "TOOL_PERMISSION_DENIED"),
        (2, "succeeded", None),
    ]
    assert outcomes[1].output == {"record": record}


def test_the_default_replans_with_the_refusal_as_an_observation(engine, client, worker):
    record = f"c-{uuid.uuid4().hex[:12]}"
    run_id = client.start_run(crm_spec(record, [crm.proposal("p1", record), CLARIFY], ask=False))
    info = client.wait(run_id, timeout=30)
    assert info.status == "needs_input" and info.waiting_for_grant is None
    assert info.model_calls == 2  # the planner saw the refusal and was asked again
    assert facts.events(engine, run_id, "grant.requested") == []
    with engine.connect() as conn:
        [(status, code, output)] = conn.execute(
            select(OutcomeRow.status, OutcomeRow.code, OutcomeRow.output).where(
                OutcomeRow.run_id == run_id
            )
        ).all()
    assert (status, code) == ("rejected", "TOOL_PERMISSION_DENIED")
    assert output == {
        "capability": crm.EXTERNAL_PERMISSION,
        "resource": crm.resource_of(record),
    }
    assert crm.effects(record) == []


def test_a_waiting_run_is_shown_in_the_api_and_can_be_cancelled(client, worker):
    from fastapi.testclient import TestClient

    from warrant.runner.client.tokens import Tokens
    from warrant.runner.server.http import create_app

    record = f"c-{uuid.uuid4().hex[:12]}"
    run_id = client.start_run(crm_spec(record, [crm.proposal("p1", record), CLARIFY], ask=True))
    assert client.wait(run_id, timeout=30).status == "waiting_grant"
    token, _ = Tokens(client.engine).create(
        f"perm-{uuid.uuid4().hex[:6]}", "viewer", created_by="t"
    )
    with TestClient(create_app(client=client)) as http:
        r = http.get(f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    waiting = r.json()["waiting_for_grant"]
    assert (waiting["source"], waiting["capability"]) == ("tool", crm.EXTERNAL_PERMISSION)
    assert waiting["resources"] == [crm.resource_of(record)]
    info = client.cancel(run_id, by="ops")
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED")
    assert crm.effects(record) == []


def _run_show(run_id: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "warrant.runner.cli", "run", "show", run_id, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert out.returncode in (0, 4), out.stderr  # a waiting run exits with the waiting code
    return dict(json.loads(out.stdout))


def _settled_after(client, run_id: str, version: int, timeout: float = 30.0):
    """The run once its version has moved past ``version`` and it settled again."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        info = client.wait(run_id, timeout=max(0.5, end - time.monotonic()))
        if info.version > version:
            return info
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not move past version {version}")
