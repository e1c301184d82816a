"""G21, a policy nobody approved decides nothing (``WARRANT_POLICY_APPROVAL=required``): a real
policy worker whose deployment policy no operator approved refuses every proposal
``POLICY_NOT_APPROVED`` (the tool's service sees no call) and says so at start; once an
operator approves the hash they reviewed (``warrant policy approve``), a new run's proposal is
accepted and executed. A wrong hash is refused ``POLICY_HASH_MISMATCH``, locally and over
HTTP, where the server checks against its own policy."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from sqlalchemy import delete, select
from warrant_demo import scenarios as sc

from tests import facts
from tests.approvals_tool import CAPABILITY as PAYMENTS
from tests.approvals_tool import paid
from tests.approvals_tool import proposal as pay_proposal
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_cli import warrant
from warrant.ledger.db import session_scope
from warrant.ledger.models import PolicyApproval, Proposal
from warrant.runner.errors import InvalidRequest
from warrant.runner.policy_version import deployment_policy
from warrant.runner.settings import load_settings
from warrant.tools._plugins import registry_for

pytestmark = [pytest.mark.services, pytest.mark.slow]

REQUIRED = {"WARRANT_POLICY_APPROVAL": "required"}
CLARIFY = {"kind": "clarify", "question": "What now?"}


def _pay_once(ledger: Any) -> dict[str, Any]:
    call = pay_proposal(ledger, 500, tool="pay_switched")
    return sc.spec([call, CLARIFY], grants=[{"capability": PAYMENTS}])


def _policy_hash() -> str:
    """The deployment's policy as this process computes it: the worker's registry and gate
    settings are the same (``WARRANT_POLICY_APPROVAL`` is no part of it)."""
    return deployment_policy(registry_for(), load_settings()).hash


def _verdicts(engine: Any, run_id: str) -> list[tuple[str, str | None]]:
    with session_scope(engine) as s:
        rows = s.execute(
            select(Proposal.status, Proposal.rejection_code)
            .where(Proposal.run_id == run_id)
            .order_by(Proposal.step)
        )
        return [(status, code) for status, code in rows]


def test_an_unapproved_policy_refuses_every_proposal_until_an_operator_approves_it(
    engine, client, services, stages_to_myself, tmp_path
):
    policy_hash = _policy_hash()
    with session_scope(engine) as s:  # a clean slate: this deployment's policy not approved
        s.execute(delete(PolicyApproval).where(PolicyApproval.policy_hash == policy_hash))
    log = tmp_path / "worker.log"
    queues = ["planner", "policy", "tool.pay_switched"]
    worker = WorkerProcess(queues, name="approval", env=REQUIRED, log=log)
    ledger = tmp_path / "payments"
    try:
        worker.wait_ready()
        said = f"policy {policy_hash[:12]} is not approved"
        wait_for(lambda: said in log.read_text(), what="the worker's warning at start")
        assert f"warrant policy approve {policy_hash} --by NAME" in log.read_text()

        refused = client.wait(client.start_run(_pay_once(ledger)), timeout=30)
        assert refused.stop_reason == "CLARIFICATION_REQUIRED", refused
        assert _verdicts(engine, refused.run_id)[0] == ("rejected", "POLICY_NOT_APPROVED")
        [rejected] = facts.events(engine, refused.run_id, "proposal.rejected")
        assert rejected.details["layer"] == "policy_approval"
        observed = client.observations(refused.run_id)[-1]["content"]
        assert observed["code"] == "POLICY_NOT_APPROVED" and policy_hash in observed["message"]
        assert paid(ledger) == 0 and facts.commands(engine, refused.run_id) == 0

        wrong = warrant("policy", "approve", "0" * 64, "--by", "ops", "--json", env=REQUIRED)
        assert wrong.returncode == 2, wrong.stderr
        assert json.loads(wrong.stdout)["error"]["code"] == "POLICY_HASH_MISMATCH"
        shown = warrant("policy", "show", "--json", env=REQUIRED)
        assert shown.returncode == 0, shown.stderr
        before = json.loads(shown.stdout)
        assert (before["policy_hash"], before["approved"], before["required"]) == (
            policy_hash,
            False,
            True,
        )
        assert "pay_switched@1" in before["form"]["contracts"]

        args = ("policy", "approve", policy_hash, "--by", "ops-alice", "--note", "reviewed")
        out = warrant(*args, "--json", env=REQUIRED)
        assert out.returncode == 0, out.stderr
        approved = json.loads(out.stdout)
        assert (approved["policy_hash"], approved["approved_by"], approved["changed"]) == (
            policy_hash,
            "ops-alice",
            True,
        )
        assert approved["note"] == "reviewed" and set(approved["diff"]) == {
            "tools_added",
            "tools_removed",
            "tools_changed",
            "settings_changed",
        }
        again = json.loads(warrant(*args, "--json", env=REQUIRED).stdout)
        assert (again["changed"], again["approved_at"]) == (False, approved["approved_at"])
        after = json.loads(warrant("policy", "show", "--json", env=REQUIRED).stdout)
        assert after["approved"] and after["approval"]["approved_by"] == "ops-alice"

        done = client.wait(client.start_run(_pay_once(ledger)), timeout=30)
        assert _verdicts(engine, done.run_id)[0] == ("accepted", None)
        assert facts.rejection_codes(engine, done.run_id) == [] and paid(ledger) == 1

        worker.stop()  # a policy worker started under an approved policy says so
        worker.restart()
        wait_for(lambda: f"policy {policy_hash[:12]} approved by ops-alice" in log.read_text())
    finally:
        worker.stop()


def test_over_http_the_server_checks_the_hash_against_its_own(client, live_api):
    from warrant.runner.client.remote import RemoteClient
    from warrant.runner.client.tokens import Tokens

    name = f"ops-{os.urandom(3).hex()}"
    token = Tokens(client.engine).create(name, "operator", created_by="tests")[0]
    remote = RemoteClient(live_api, token)
    try:
        shown = remote.policy()
        assert shown["policy_hash"] == _policy_hash() == client.policy()["policy_hash"]
        with pytest.raises(InvalidRequest) as refused:
            remote.approve_policy("f" * 64, by="ignored")
        assert refused.value.code == "POLICY_HASH_MISMATCH"
        approved = remote.approve_policy(shown["policy_hash"], by="ignored", note="over http")
        assert approved["policy_hash"] == shown["policy_hash"]
        if approved["changed"]:  # who approved is the token's, never the body's
            assert approved["approved_by"] == f"{name} (operator)"
        assert remote.policy()["approved"] is True
    finally:
        remote.close()
