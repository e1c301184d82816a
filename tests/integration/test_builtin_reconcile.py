"""The built-in writes are keyed by their idempotency token, so they reconcile: an unknown
outcome of ``write_artifact`` or ``save_preference`` is settled by asking the store, not handed
to a person."""

from __future__ import annotations

import uuid

import pytest
from warrant_demo import scenarios as sc

from tests.integration.test_gate_pipeline import memory_spec, save, write
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command
from warrant.ledger.stores import LedgerToolDeps
from warrant.tools._builtin import SAVE_PREFERENCE, WRITE_ARTIFACT
from warrant.tools._contract import ToolContext

pytestmark = [pytest.mark.services, pytest.mark.slow]

ARTIFACTS = {"capability": "artifact:write", "resource_scope": "run-output/*"}


def context(engine, token: str) -> ToolContext:
    return ToolContext(
        run_id="-",
        command_id="-",
        subject="-",
        idempotency_token=token,
        attempt=1,
        deadline_at=0.0,
        deps=LedgerToolDeps(engine),
    )


def token_of(engine, run_id: str, tool: str) -> str:
    with session_scope(engine) as s:
        return s.query(Command).filter_by(run_id=run_id, tool=tool).one().idempotency_token


def test_write_artifact_reconciles_by_its_token(engine, run_to_end):
    info = run_to_end(sc.spec([write(), sc.final("Written.", "tool-1")], grants=[ARTIFACTS]))
    assert info.status == "completed", info
    token = token_of(engine, info.run_id, "write_artifact")
    found = WRITE_ARTIFACT.reconcile(token, context(engine, token))
    assert found.applied is True and found.output["path"] == "run-output/a.md"
    assert len(found.output["sha256"]) == 64
    never = WRITE_ARTIFACT.reconcile("0" * 64, context(engine, "0" * 64))
    assert (never.applied, never.output) == (False, None)


def test_save_preference_reconciles_by_its_token(engine, client, worker):
    subject = f"reconcile-{uuid.uuid4().hex[:8]}"
    run_id = client.start_run(
        memory_spec([save("zh-CN", pid="p1"), sc.final("ok", "tool-1")], subject)
    )
    waiting = client.wait(run_id, timeout=30)
    assert waiting.status == "waiting_confirmation", waiting
    client.confirm(run_id, proposal_hash=waiting.confirmation_request["proposal_hash"], by="alice")
    assert client.wait(run_id, timeout=30, until={"completed", "failed"}).status == "completed"
    token = token_of(engine, run_id, "save_preference")
    found = SAVE_PREFERENCE.reconcile(token, context(engine, token))
    assert found.applied is True and found.output == {"key": "answer_language", "version": 1}
    assert SAVE_PREFERENCE.reconcile("1" * 64, context(engine, "1" * 64)).applied is False
