"""API tokens (created, listed and revoked over the CLI; authenticated by the client's
service), idempotent run starts (a repeat, a reused key, a race) and the own-run approval bar."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_cli import warrant
from tests.integration.test_gate_pipeline import memory_spec, save
from warrant.broker.publish import RecordingPublisher
from warrant.ledger.db import session_scope
from warrant.ledger.models import ApiToken, Confirmation, Run
from warrant.runner.authz import Identity, Role
from warrant.runner.client.api import Client
from warrant.runner.client.tokens import Tokens
from warrant.runner.errors import Forbidden, StateConflict, TokenInvalid

pytestmark = pytest.mark.services


def _json(*args: str) -> tuple[int, Any]:
    out = warrant(*args, "--json")
    return out.returncode, json.loads(out.stdout)


def _spec(answer: str = "Three.") -> dict[str, Any]:
    return sc.spec([sc.search("p1"), sc.final(answer, "tool-1")])


# --- tokens ------------------------------------------------------------------------------------


def test_tokens_over_the_cli_and_authenticate(engine) -> None:
    code, created = _json("token", "create", "ci-bot", "--role", "producer", "--by", "root")
    assert code == 0, created
    token = created["token"]
    assert token.startswith("wrt_") and len(token) == 4 + 43
    assert (created["name"], created["role"], created["created_by"]) == (
        "ci-bot",
        "producer",
        "root",
    )
    with session_scope(engine) as s:
        row = s.get(ApiToken, created["token_id"])
        assert row is not None and row.last_used_at is None and row.revoked_at is None
        assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()  # only the hash

    code, listed = _json("token", "list")
    [mine] = [t for t in listed if t["token_id"] == created["token_id"]]
    assert "token" not in mine and "token_hash" not in mine and mine["active"] is True

    tokens = Tokens(engine)
    identity = tokens.authenticate(token)
    assert identity == Identity(token_id=created["token_id"], name="ci-bot", role=Role.PRODUCER)
    assert identity.label == "ci-bot (producer)"
    with session_scope(engine) as s:
        assert s.get(ApiToken, created["token_id"]).last_used_at is not None  # type: ignore[union-attr]

    code, revoked = _json("token", "revoke", created["token_id"], "--by", "root")
    assert code == 0 and revoked["active"] is False and revoked["revoked_by"] == "root"
    with pytest.raises(TokenInvalid) as caught:
        tokens.authenticate(token)
    assert caught.value.code == "TOKEN_INVALID"
    again = tokens.revoke(created["token_id"], by="someone else")  # revoking again: no change
    assert (again["revoked_at"], again["revoked_by"]) == (revoked["revoked_at"], "root")


def test_missing_unknown_and_bad_requests_are_refused(engine) -> None:
    tokens = Tokens(engine)
    for presented in (None, "", "wrt_not-a-token", "Bearer something"):
        with pytest.raises(TokenInvalid):
            tokens.authenticate(presented)
    code, out = _json("token", "create", "x", "--role", "admin")
    assert (code, out["error"]["code"]) == (2, "UNKNOWN_ROLE")
    code, out = _json("token", "create", "  ", "--role", "viewer")
    assert (code, out["error"]["code"]) == (2, "TOKEN_NAME_INVALID")
    code, out = _json("token", "revoke", "no-such-token")
    assert (code, out["error"]["code"]) == (2, "TOKEN_NOT_FOUND")
    token, _ = tokens.create("viewer-1", Role.VIEWER, created_by="test")
    assert tokens.authenticate(token).role is Role.VIEWER
    assert tokens.create("viewer-1", "viewer", created_by="test")[0] != token


def test_a_token_is_revoked_by_the_name_it_was_created_with(engine) -> None:
    """``token create NAME`` then ``token revoke NAME`` (it used to answer TOKEN_NOT_FOUND)."""
    name = f"viewer-{uuid.uuid4().hex[:8]}"
    code, created = _json("token", "create", name, "--role", "viewer")
    assert code == 0
    code, revoked = _json("token", "revoke", name, "--by", "root")
    assert code == 0 and revoked["token_id"] == created["token_id"] and not revoked["active"]
    with pytest.raises(TokenInvalid):
        Tokens(engine).authenticate(created["token"])
    code, out = _json("token", "revoke", name)  # no active token of that name is left
    assert (code, out["error"]["code"]) == (2, "TOKEN_NOT_FOUND")
    _json("token", "create", name, "--role", "viewer")
    _json("token", "create", name, "--role", "viewer")
    code, out = _json("token", "revoke", name)  # two active ones: which is not guessed
    assert (code, out["error"]["code"]) == (2, "ID_AMBIGUOUS") and len(out["error"]["matches"]) == 2


# --- idempotent start ---------------------------------------------------------------------------


@pytest.fixture
def recording(engine) -> Client:
    return Client(engine=engine, publisher=RecordingPublisher())


def _key(request: pytest.FixtureRequest) -> str:
    return f"key-{request.node.name}-{id(request)}"


def test_the_same_key_and_spec_returns_the_run_and_publishes_once(
    recording: Client, engine, request
) -> None:
    key = _key(request)
    first = recording.start_run(_spec(), idempotency_key=key, started_by="ci-bot (producer)")
    reordered = dict(reversed(list(_spec().items())))  # same spec, other key order
    assert recording.start_run(reordered, idempotency_key=key, started_by="other") == first
    assert recording.publisher.sent == [("planner", {"run_id": first, "version": 1})]
    info = recording.get_run(first)
    assert (info.idempotency_key, info.started_by) == (key, "ci-bot (producer)")
    assert facts.count(engine, Run, idempotency_key=key) == 1

    with pytest.raises(StateConflict) as caught:
        recording.start_run(_spec("Four."), idempotency_key=key)
    assert caught.value.code == "IDEMPOTENCY_KEY_REUSED"
    assert facts.count(engine, Run, idempotency_key=key) == 1
    other = recording.start_run(_spec())  # no key: a new run every time
    assert other != first and recording.get_run(other).idempotency_key is None


def test_two_concurrent_starts_with_one_key_record_one_run(
    recording: Client, engine, request, monkeypatch
) -> None:
    """Both threads pass the look-up before either inserts (a barrier holds them): the unique
    index lets one insert win; the other finds the winner's run by the key."""
    from warrant.runner.client import runs

    key, barrier, seen = _key(request), threading.Barrier(2, timeout=30), threading.local()
    real, calls = runs.run_for_key, []

    def looked_up_together(engine_: Any, start: dict[str, Any]) -> str | None:
        first_call = not getattr(seen, "called", False)
        seen.called = True
        found = real(engine_, start)
        calls.append(found)
        if first_call:
            barrier.wait()
        return found

    monkeypatch.setattr(runs, "run_for_key", looked_up_together)
    results: list[str] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            results.append(recording.start_run(_spec(), idempotency_key=key))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and len(results) == 2 and results[0] == results[1]
    # two look-ups found nothing; the loser's insert hit the unique index and found the winner
    assert calls == [None, None, results[0]]
    assert facts.count(engine, Run, idempotency_key=key) == 1
    assert recording.publisher.sent == [("planner", {"run_id": results[0], "version": 1})]


def test_run_start_over_the_cli_with_an_idempotency_key(tmp_path, engine, request) -> None:
    key, path = _key(request), tmp_path / "spec.json"
    path.write_text(json.dumps(_spec()))
    code, first = _json("run", "start", str(path), "--idempotency-key", key)
    assert code == 0, first
    code, again = _json("run", "start", str(path), "--idempotency-key", key)
    assert code == 0 and again["run_id"] == first["run_id"]
    path.write_text(json.dumps(_spec("Other.")))
    code, out = _json("run", "start", str(path), "--idempotency-key", key)
    assert (code, out["error"]["code"]) == (2, "IDEMPOTENCY_KEY_REUSED")
    assert facts.count(engine, Run, idempotency_key=key) == 1


# --- own-run approval ----------------------------------------------------------------------


@pytest.mark.slow
def test_an_approver_may_not_decide_on_a_run_they_started_by_default(
    client, engine, worker, monkeypatch
) -> None:
    subject = "own-run-approval"
    spec = memory_spec([save("zh-CN", pid="p1"), sc.final("Saved.", "tool-1")], subject)
    run_id = client.start_run(spec, started_by="alice (producer)")
    info = client.wait(run_id, timeout=30)
    assert info.status == "waiting_confirmation", info
    proposal = info.confirmation_request["proposal_hash"]

    monkeypatch.delenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", raising=False)
    for by in ("alice (producer)", "alice (approver)"):
        with pytest.raises(Forbidden) as caught:
            client.confirm(run_id, proposal_hash=proposal, by=by)
        assert caught.value.code == "OWN_RUN_APPROVAL_FORBIDDEN"
    assert facts.count(engine, Confirmation, run_id=run_id) == 0
    assert client.get_run(run_id).version == info.version

    version = client.confirm(run_id, proposal_hash=proposal, by="bob (approver)")
    assert version == info.version + 1
    with session_scope(engine) as s:
        decided = s.scalars(select(Confirmation.decided_by).where(Confirmation.run_id == run_id))
        assert decided.all() == ["bob (approver)"]


@pytest.mark.slow
def test_the_deployment_may_let_the_starter_decide_traced(
    client, engine, worker, monkeypatch
) -> None:
    """``WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS=1`` (the opt-out): the starter declines its own
    run's proposal, and the trace says who and why it was allowed."""
    spec = memory_spec([save("fr-FR", pid="p1")], "own-run-opt-out")
    run_id = client.start_run(spec, started_by="carol (operator)")
    info = client.wait(run_id, timeout=30)
    assert info.status == "waiting_confirmation", info
    monkeypatch.setenv("WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS", "1")
    phash = info.confirmation_request["proposal_hash"]
    client.decline(run_id, proposal_hash=phash, by="carol (approver)")
    [traced] = facts.events(engine, run_id, "confirmation.self_approved")
    assert traced.details["by"] == "carol (approver)"
    assert traced.details["allowed_by"] == "deployment"
