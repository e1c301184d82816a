"""One client contract (issue 48): the database-backed ``Client`` and a ``RemoteClient`` of a
real ``warrant serve`` subprocess return the same records for the same run (observations,
budgets, the approval inbox, the next change, handoffs, memory)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests.integration import test_remote_cli as remote_cli
from tests.integration.test_gate_pipeline import memory_spec, save
from warrant.runner.client.remote import RemoteClient
from warrant.runner.errors import Forbidden

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: ``warrant serve`` as a subprocess on a free port, and a token per role (test_remote_cli's).
server = remote_cli.server
tokens = remote_cli.tokens


def test_both_clients_return_the_same_records(client, worker, server, tokens):
    value = f"v-{uuid.uuid4().hex[:12]}"
    subject = f"contract-{uuid.uuid4().hex[:8]}"
    outputs = [sc.search("p1"), save(value), sc.final("Saved.", "tool-1", "tool-2")]
    run_id = client.start_run(memory_spec(outputs, subject))
    info = client.wait(run_id, timeout=60)
    assert info.status == "waiting_confirmation", info

    def mine(found: list[Any]) -> list[Any]:
        return [p for p in found if p.run_id == run_id]

    with RemoteClient(server, tokens["operator"]) as remote:
        assert remote.observations(run_id) == client.observations(run_id)
        assert remote.budgets(run_id) == client.budgets(run_id)
        local = mine(client.pending_confirmations(reveal_sensitive=True))
        assert len(local) == 1
        assert mine(remote.pending_confirmations(reveal_sensitive=True)) == local
        seen = info.version - 1
        assert remote.wait_change(run_id, version=seen, timeout=5) == client.wait_change(
            run_id, version=seen, timeout=5
        )
        assert remote.handoffs(open_only=False, limit=5) == client.handoffs(
            open_only=False, limit=5
        )
        assert remote.memory_records(subject, include_inactive=True) == client.memory_records(
            subject, include_inactive=True
        )

    with RemoteClient(server, tokens["producer"]) as producer:
        with pytest.raises(Forbidden) as refused:
            producer.pending_confirmations(reveal_sensitive=True)
        assert refused.value.code == "REVEAL_FORBIDDEN"
        masked = mine(producer.pending_confirmations(reveal_sensitive=False))
        assert masked == mine(client.pending_confirmations(reveal_sensitive=False))
        assert value not in repr(masked)
        assert producer.policy_tools(seen_within_s=90.0) is None
