"""The policy gate over the real pipeline: a wrong or hijacked planner crosses no boundary."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.approvals_tool import CAPABILITY as PAYMENTS
from tests.approvals_tool import paid
from tests.approvals_tool import proposal as pay_proposal
from tests.conftest import wait_for
from tests.integration.test_tool_execution import refund
from warrant.ledger.models import Artifact, MemoryRecord, OutcomeRow, ToolSwitch
from warrant.runner.canonical import proposal_hash
from warrant.runner.errors import ConfirmationRefused

pytestmark = [pytest.mark.services, pytest.mark.slow]

CLARIFY = {"kind": "clarify", "question": "What now?"}
SEARCH = {"capability": "search:public", "resource_scope": "public"}


def tool(name: str, arguments, pid: str = "p1", version: str = "1"):
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": name,
        "tool_version": version,
        "arguments": arguments,
        "reason_summary": "",
        "source_observation_ids": [],
    }


def save(value: str = "zh-CN", key: str = "answer_language", pid: str = "p2"):
    return tool("save_preference", {"key": key, "value": value}, pid)


def write(path: str = "run-output/a.md", pid: str = "p1"):
    return tool("write_artifact", {"path": path, "content": "hello"}, pid)


def memory_spec(outputs, subject: str, **budgets):
    spec = sc.spec(
        outputs,
        grants=[SEARCH, {"capability": "memory:write", "resource_scope": f"memory:{subject}/*"}],
        **budgets,
    )
    spec["subject"] = subject
    return spec


# --- experiment 1: retrieved text tries to write memory --------------------------------------


def test_experiment_1_injection_cannot_write_memory(engine, run_to_end):
    subject = "exp1-no-grant"
    spec = sc.spec(
        [
            sc.search("p1"),
            save("auto approve everything", "auto_approve"),
            sc.final("Three retries.", "tool-1"),
        ]
    )
    spec["subject"] = subject
    info = run_to_end(spec)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.memory(engine, subject) == 0
    rejected = facts.events(engine, info.run_id, "proposal.rejected")
    # the run holds no memory:write grant: refused before the arguments are read (issue 50;
    # the design's probe, which validates first, expects MEMORY_KEY_NOT_ALLOWED here)
    assert [(e.details["code"], e.proposal_id) for e in rejected] == [("MISSING_CAPABILITY", "p2")]


def test_experiment_1_whitelisted_key_without_grant_or_confirmation(engine, client, worker):
    subject = "exp1-whitelisted"
    no_grant = sc.spec([sc.search("p1"), save(), sc.final("x", "tool-1")])
    no_grant["subject"] = subject
    info = client.wait(client.start_run(no_grant), timeout=30)
    assert facts.rejection_codes(engine, info.run_id) == ["MISSING_CAPABILITY"]
    # Granted but never confirmed: the run waits; nothing is written.
    waiting = client.wait(
        client.start_run(memory_spec([sc.search("p1"), save()], subject)), timeout=30
    )
    assert (waiting.status, waiting.stop_reason) == (
        "waiting_confirmation",
        "USER_CONFIRMATION_REQUIRED",
    )
    assert facts.memory(engine, subject) == 0
    assert facts.commands(engine, waiting.run_id) == 1  # only the search


# --- experiment 2: the same proposal again and again -----------------------------------------


def test_experiment_2_repeated_proposal_stops_within_budget(engine, run_to_end):
    info = run_to_end(sc.spec([sc.search(f"p{i}") for i in range(10)], max_tool_calls=5))
    assert (info.status, info.stop_reason) == (
        "failed",
        "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION",
    )
    assert info.tool_calls == 3 and facts.commands(engine, info.run_id) == 3
    loop = facts.events(engine, info.run_id, "proposal.loop_detected")
    assert len(loop) == 1 and loop[0].details["count"] == 3


def test_experiment_2_repeated_refusal_also_stops(engine, run_to_end):
    info = run_to_end(sc.spec([tool("rm_rf", {}, f"p{i}") for i in range(10)]))
    assert info.stop_reason == "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    # The first refusal is new information (observation policy-1); three more identical
    # proposals without anything new, and the third of those stops the run.
    assert facts.rejection_codes(engine, info.run_id) == ["UNKNOWN_TOOL_OR_VERSION"] * 4
    assert len(facts.events(engine, info.run_id, "proposal.loop_detected")) == 1
    assert facts.commands(engine, info.run_id) == 0


def test_experiment_2_a_new_observation_resets_the_count(run_to_end):
    a, b = sc.search("a", "query a"), sc.search("b", "query b")
    info = run_to_end(sc.spec([a, a, b, a, a, sc.final("ok", "tool-1")], max_tool_calls=6))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert info.tool_calls == 5


def test_oscillation_a_b_a_b_stops(engine, run_to_end):
    a, b = sc.search("a", "query a"), sc.search("b", "query b")
    info = run_to_end(sc.spec([a, b, a, b, a, b, a, b], max_tool_calls=8, max_steps=10))
    assert (info.status, info.stop_reason) == ("failed", "PROPOSAL_OSCILLATION_DETECTED")
    assert info.tool_calls == 5


# --- confirmations ---------------------------------------------------------------------------


def _waiting(client, spec):
    run_id = client.start_run(spec)
    info = client.wait(run_id, timeout=30)
    assert info.status == "waiting_confirmation", info
    return info


def test_confirmation_round_trip_executes_exactly_once(engine, client, worker):
    subject = "confirm-roundtrip"
    info = _waiting(
        client,
        memory_spec(
            [sc.search("p1"), save("zh-CN"), sc.final("Saved.", "tool-1", "tool-2")], subject
        ),
    )
    request = info.confirmation_request
    h = proposal_hash(
        "save_preference", "1", {"key": "answer_language", "value": "zh-CN", "expected_version": 0}
    )
    assert request["proposal_hash"] == h
    assert request["parameters"] == {
        "key": "answer_language",
        "value": "<sensitive>",
        "expected_version": 0,
    }
    assert (
        request["side_effect"] == "idempotent-write"
        and request["resource"] == f"memory:{subject}/answer_language"
    )

    # Wrong hash, and a hash for other arguments: refused, nothing moves.
    other = proposal_hash(
        "save_preference", "1", {"key": "answer_language", "value": "en", "expected_version": 0}
    )
    for bad in ("0" * 64, other):
        with pytest.raises(ConfirmationRefused) as caught:
            client.confirm(info.run_id, proposal_hash=bad, by="alice")
        assert caught.value.code == "CONFIRMATION_HASH_MISMATCH"
    assert client.get_run(info.run_id).version == info.version

    client.confirm(info.run_id, proposal_hash=h, by="alice")
    done = client.wait(info.run_id, timeout=30)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert facts.memory(engine, subject) == 1
    assert facts.commands(engine, info.run_id) == 2
    with pytest.raises(ConfirmationRefused) as caught:  # reuse after it was consumed
        client.confirm(info.run_id, proposal_hash=h, by="alice")
    assert caught.value.code == "RUN_NOT_WAITING_CONFIRMATION"
    names = [e.event for e in facts.events(engine, info.run_id)]
    assert names.count("confirmation.requested") == 1
    assert names.count("confirmation.approved") == 1


def test_a_used_confirmation_does_not_cover_a_repeat_or_changed_arguments(engine, client, worker):
    subject = "confirm-reuse"
    spec = memory_spec(
        [
            save("zh-CN", pid="p1"),
            save("zh-CN", pid="p2"),
            save("en", pid="p3"),
            sc.final("x", "tool-1"),
        ],
        subject,
    )
    info = _waiting(client, spec)
    h = info.confirmation_request["proposal_hash"]
    client.confirm(info.run_id, proposal_hash=h, by="alice")
    # The same proposal again: the consumed confirmation does not cover it.
    again = wait_for(
        lambda: (
            (i := client.get_run(info.run_id)).status == "waiting_confirmation"
            and i.step == 2
            and i
        ),
        what="second request",
    )
    assert again.confirmation_request["proposal_hash"] == h
    assert facts.memory(engine, subject) == 1
    client.decline(info.run_id, proposal_hash=h, by="alice")
    # Changed arguments: a new hash, a new request.
    third = wait_for(
        lambda: (
            (i := client.get_run(info.run_id)).step == 3
            and i.status == "waiting_confirmation"
            and i
        ),
        what="third request",
    )
    assert third.confirmation_request["proposal_hash"] != h
    assert facts.memory(engine, subject) == 1
    assert "CONFIRMATION_DECLINED" in facts.rejection_codes(engine, info.run_id)
    observations = client.observations(info.run_id)
    assert {
        "observation_id": observations[-1]["observation_id"],
        "code": observations[-1]["content"]["code"],
    } == {"observation_id": "policy-2", "code": "CONFIRMATION_DECLINED"}


def test_confirmation_of_another_runs_proposal_is_refused(client, worker):
    one = _waiting(client, memory_spec([save("zh-CN", pid="p1")], "confirm-a"))
    two = _waiting(client, memory_spec([save("fr", pid="p1")], "confirm-b"))
    with pytest.raises(ConfirmationRefused) as caught:
        client.confirm(
            one.run_id, proposal_hash=two.confirmation_request["proposal_hash"], by="mallory"
        )
    assert caught.value.code == "CONFIRMATION_HASH_MISMATCH"


def test_an_expired_request_cannot_be_confirmed(engine, client, worker):
    subject = "confirm-expired"
    info = _waiting(client, memory_spec([save()], subject, confirmation_ttl_s=0.3))
    expires = info.confirmation_request["expires_at"]
    assert isinstance(expires, str) and expires.endswith("+00:00")  # ISO 8601, like every time
    at = datetime.fromisoformat(expires).timestamp()
    wait_for(lambda: time.time() > at, timeout=5, what="expiry")
    with pytest.raises(ConfirmationRefused) as caught:
        client.confirm(
            info.run_id, proposal_hash=info.confirmation_request["proposal_hash"], by="alice"
        )
    assert caught.value.code == "CONFIRMATION_EXPIRED"
    assert facts.memory(engine, subject) == 0


def test_confirm_from_the_cli(engine, client, worker):
    from tests.integration.test_cli import warrant

    subject = "confirm-cli"
    info = _waiting(client, memory_spec([save(), sc.final("x", "tool-1")], subject))
    shown = warrant("run", "show", info.run_id)
    assert "confirmation required" in shown.stdout
    h = info.confirmation_request["proposal_hash"]
    # piped: the command to paste stays on one line (it wrapped at the console's width)
    command = f"warrant run confirm {info.run_id} --proposal-hash {h} --by NAME"
    assert any(line.strip() == command for line in shown.stdout.splitlines()), shown.stdout
    bad = warrant(
        "run", "confirm", info.run_id, "--proposal-hash", "f" * 64, "--by", "bob", "--json"
    )
    assert bad.returncode == 2
    import json

    assert json.loads(bad.stdout)["error"]["code"] == "CONFIRMATION_HASH_MISMATCH"
    ok = warrant("run", "confirm", info.run_id, "--proposal-hash", h, "--by", "bob", "--json")
    assert ok.returncode == 0, ok.stderr
    done = client.wait(info.run_id, timeout=30)
    assert done.status == "completed" and facts.memory(engine, subject) == 1
    with engine.connect() as conn:
        from sqlalchemy import text

        by = conn.execute(
            text("SELECT decided_by FROM confirmations WHERE run_id=:r"), {"r": info.run_id}
        ).scalar_one()
    assert by == "bob"


def test_operator_grant_unlocks_a_later_step(engine, client, worker):
    spec = sc.spec([write(pid="p1"), write(pid="p2"), sc.final("x", "tool-1")], grants=[])
    run_id = client.start_run(spec, publish=False)
    client.add_grant(
        run_id,
        capability="artifact:write",
        resource_scope="run-output/*",
        granted_by="ops",
        max_uses=1,
    )
    client.publisher.planner(run_id, 1)
    info = client.wait(run_id, timeout=30)
    # First write runs under the API grant; the second is a repeat (same args, no new
    # observation) and the grant's single use is spent anyway.
    assert info.stop_reason in ("FINAL_ANSWER_VALIDATED",)
    assert facts.count(engine, Artifact, run_id=run_id) == 1
    assert facts.rejection_codes(engine, run_id) == ["GRANT_EXHAUSTED"]
    added = facts.events(engine, run_id, "grant.added")
    assert added[0].details["by"] == "ops"


def _pay_twice(tool_name: str, ledger):
    calls = [
        pay_proposal(ledger, 500, tool=tool_name, pid=f"p{n}", payee=f"payee-{n}") for n in (1, 2)
    ]
    return sc.spec([*calls, sc.final("Paid.", "tool-1")], grants=[{"capability": PAYMENTS}])


def test_a_per_run_confirmation_covers_the_tools_later_calls(engine, client, worker, tmp_path):
    ledger = tmp_path / "payments"
    info = _waiting(client, _pay_twice("pay_per_run", ledger))
    assert info.confirmation_request["confirmation"] == "per-run"
    client.confirm(info.run_id, proposal_hash=info.confirmation_request["proposal_hash"], by="ops")
    done = client.wait(info.run_id, timeout=30)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), done
    assert paid(ledger) == 2 and facts.commands(engine, info.run_id) == 2
    names = [e.event for e in facts.events(engine, info.run_id)]
    assert names.count("confirmation.requested") == 1
    assert names.count("confirmation.approved") == 1
    # replayed: the person's per-run approval still covers the second call (no change), and
    # under a per-call candidate the second call would wait too (issue 55)
    assert [s["change"] for s in client.replay_run(info.run_id)["steps"]] == [None, None]
    per_call = {"contracts": {"pay_per_run": {"confirmation": "per-call"}}}
    replayed = client.replay_run(info.run_id, candidate=per_call)
    assert [s["change"] for s in replayed["steps"]] == [None, "confirmation_now_needed"]
    assert paid(ledger) == 2


def test_a_per_call_confirmation_is_asked_for_each_call(engine, client, worker, tmp_path):
    ledger = tmp_path / "payments"
    info = _waiting(client, _pay_twice("pay", ledger))
    assert info.confirmation_request["confirmation"] == "per-call"
    client.confirm(info.run_id, proposal_hash=info.confirmation_request["proposal_hash"], by="ops")
    again = wait_for(
        lambda: (
            (i := client.get_run(info.run_id)).status == "waiting_confirmation"
            and i.step == 2
            and i
        ),
        what="second request",
    )
    assert paid(ledger) == 1
    client.confirm(info.run_id, proposal_hash=again.confirmation_request["proposal_hash"], by="ops")
    done = client.wait(info.run_id, timeout=30)
    assert done.status == "completed" and paid(ledger) == 2
    names = [e.event for e in facts.events(engine, info.run_id)]
    assert names.count("confirmation.requested") == 2
    # replayed: asked then and now, at both steps; relaxed to never, neither would ask
    assert [s["change"] for s in client.replay_run(info.run_id)["steps"]] == [None, None]
    never = {"contracts": {"pay": {"confirmation": "never"}}, "relax_confirmation": ["pay"]}
    replayed = client.replay_run(info.run_id, candidate=never)
    assert [s["change"] for s in replayed["steps"]] == ["confirmation_no_longer_needed"] * 2
    assert paid(ledger) == 2


# --- the kill switch (``warrant tools disable``) ---------------------------------------------


@pytest.fixture
def switched_off(client):
    """``pay_switched`` disabled for the test, enabled again after it."""
    client.disable_tool("pay_switched", by="ops", reason="double charges")
    yield "pay_switched"
    client.enable_tool("pay_switched", by="ops")


def _pay_once(ledger, pid: str = "p1"):
    call = pay_proposal(ledger, 500, tool="pay_switched", pid=pid)
    return sc.spec([call, CLARIFY], grants=[{"capability": PAYMENTS}])


def test_a_disabled_tool_is_refused_then_enabled_goes_through(
    engine, client, worker, tmp_path, switched_off
):
    ledger = tmp_path / "payments"
    refused = client.wait(client.start_run(_pay_once(ledger)), timeout=30)
    assert refused.stop_reason == "CLARIFICATION_REQUIRED", refused
    assert facts.rejection_codes(engine, refused.run_id) == ["TOOL_DISABLED"]
    [rejected] = facts.events(engine, refused.run_id, "proposal.rejected")
    assert rejected.details["code"] == "TOOL_DISABLED"
    observed = client.observations(refused.run_id)[-1]["content"]
    assert observed["code"] == "TOOL_DISABLED" and "double charges" in observed["message"]
    assert paid(ledger) == 0 and facts.commands(engine, refused.run_id) == 0

    enabled = client.enable_tool(switched_off, by="ops")
    assert (enabled["event"], enabled["changed"], enabled["disabled"]) == (
        "tool.enabled",
        True,
        False,
    )
    done = client.wait(client.start_run(_pay_once(ledger)), timeout=30)
    assert facts.rejection_codes(engine, done.run_id) == [] and paid(ledger) == 1
    with engine.connect() as conn:
        history = conn.execute(
            select(ToolSwitch.history).where(ToolSwitch.tool == switched_off)
        ).scalar_one()
    assert [h["event"] for h in history][-2:] == ["tool.disabled", "tool.enabled"]
    assert history[-2]["reason"] == "double charges" and history[-2]["by"] == "ops"


def test_an_issued_command_of_a_disabled_tool_is_refused_at_its_claim(engine, client, tmp_path):
    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.broker.policy.stage import policy_evaluate
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.tool.stage import tool_execute

    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher)
    ledger = tmp_path / "payments"
    run_id = client.start_run(_pay_once(ledger), publish=False)
    planner_step(ctx, run_id, 1)
    (_, policy_message) = publisher.sent.pop(0)
    assert policy_evaluate(ctx, run_id, policy_message["version"]) == "accepted"
    (_, m) = publisher.sent.pop(0)  # the command is issued, its message not delivered yet
    client.disable_tool("pay_switched", by="ops", reason="stop now")
    try:
        result = tool_execute(ctx, run_id, m["version"], m["command_id"], tool=m["tool"])
    finally:
        client.enable_tool("pay_switched", by="ops")
    assert result == "rejected:TOOL_DISABLED"
    assert paid(ledger) == 0  # the tool was never called
    with engine.connect() as conn:
        outcome = conn.execute(
            select(OutcomeRow.status, OutcomeRow.code).where(OutcomeRow.run_id == run_id)
        ).one()
    assert tuple(outcome) == ("rejected", "TOOL_DISABLED")
    [completed] = facts.events(engine, run_id, "tool.completed")
    assert completed.details.get("code") == "TOOL_DISABLED", completed.details


# --- refusals before any tool code runs ------------------------------------------------------

BIG = "x" * 20_000
DEEP: object = "x"
for _ in range(100):  # past the gate's bound (64), well within what the ledger stores
    DEEP = [DEEP]
CASES = [
    ("PROPOSAL_PARSE_FAILED", {"kind": "tool", "tool": "search_public"}, [SEARCH]),
    ("PROPOSAL_TOO_DEEP", tool("search_public", {"query": DEEP}), [SEARCH]),
    ("UNKNOWN_TOOL_OR_VERSION", tool("shell", {"cmd": "rm -rf /"}), [SEARCH]),
    ("UNKNOWN_TOOL_OR_VERSION", tool("search_public", {"query": "x"}, version="9"), [SEARCH]),
    ("INPUT_NOT_OBJECT", tool("search_public", "query"), [SEARCH]),
    ("UNKNOWN_INPUT_FIELD", tool("search_public", {"query": "x", "limit": 5}), [SEARCH]),
    ("INVALID_QUERY", tool("search_public", {"query": 42}), [SEARCH]),
    ("INPUT_TOO_LARGE", tool("search_public", {"query": BIG}), [SEARCH]),
    ("MISSING_CAPABILITY", write(), [SEARCH]),
    (
        "RESOURCE_OUT_OF_SCOPE",
        write(),
        [{"capability": "artifact:write", "resource_scope": "reports/*"}],
    ),
    ("GRANT_EXPIRED", write(), [{"capability": "artifact:write", "expires_at_step": 0}]),
    ("PATH_OUTSIDE_RUN_OUTPUT", write("../etc/passwd"), [{"capability": "artifact:write"}]),
    ("MEMORY_KEY_NOT_ALLOWED", save("yes", "system_instruction"), [{"capability": "memory:write"}]),
    ("MEMORY_VALUE_TOO_LONG", save("x" * 41), [{"capability": "memory:write"}]),
]


def test_every_rejection_code_refuses_before_the_tool_runs(engine, client, worker):
    started = []
    for code, bad, grants in CASES:
        spec = sc.spec([bad, CLARIFY], grants=grants)
        spec["subject"] = "bad-input"
        started.append((code, client.start_run(spec)))
    for code, run_id in started:
        info = client.wait(run_id, timeout=30)
        assert info.stop_reason == "CLARIFICATION_REQUIRED", (code, info)
        assert facts.rejection_codes(engine, run_id) == [code]
        assert facts.commands(engine, run_id) == 0, code
        assert not facts.events(engine, run_id, "tool.started"), code
        obs = client.observations(run_id)
        assert obs[-1]["observation_id"] == "policy-1" and obs[-1]["content"]["code"] == code
    assert facts.memory(engine, "bad-input") == 0
    assert facts.count(engine, MemoryRecord, key="system_instruction") == 0


def test_a_long_unknown_tool_name_is_not_copied_whole_into_the_trace(engine, client, worker):
    long_name = "n" * 200
    run_id = client.start_run(sc.spec([tool(long_name, {}), CLARIFY], grants=[SEARCH]))
    info = client.wait(run_id, timeout=30)
    assert info.stop_reason == "CLARIFICATION_REQUIRED", info
    assert facts.rejection_codes(engine, run_id) == ["UNKNOWN_TOOL_OR_VERSION"]
    for event in facts.events(engine, run_id):
        assert long_name not in repr(event.details), event.event
    obs = client.observations(run_id)[-1]["content"]
    assert obs["code"] == "UNKNOWN_TOOL_OR_VERSION" and long_name not in repr(obs)
    assert obs["tool"].startswith("n" * 64) and len(obs["tool"]) < 100


# --- budgets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budgets", "planner_usage", "reason", "tool_calls"),
    [
        ({"max_steps": 2}, None, "MAX_STEPS_REACHED", 2),
        ({"max_model_calls": 2}, None, "MAX_MODEL_CALLS_REACHED", 2),
        ({"max_tool_calls": 1}, None, "MAX_TOOL_CALLS_REACHED", 1),
        ({"max_tool_calls_per_tool": {"search_public": 2}}, None, "MAX_TOOL_CALLS_REACHED", 2),
        (
            {"max_tokens": 250},
            {"prompt_tokens": 100, "completion_tokens": 20},
            "MAX_TOKENS_REACHED",
            3,
        ),
        ({"max_cost": 0.05}, {"cost": 0.02}, "MAX_COST_REACHED", 3),
        ({"deadline_s": 0.001}, None, "DEADLINE_REACHED", 0),
    ],
)
def test_each_budget_has_its_own_stop_reason(
    engine, run_to_end, budgets, planner_usage, reason, tool_calls
):
    spec = sc.spec(
        [sc.search(f"p{i}", f"query {i}") for i in range(10)],
        max_tool_calls=budgets.pop("max_tool_calls", 8),
        max_steps=budgets.pop("max_steps", 9),
        **budgets,
    )
    if planner_usage:
        spec["planner"]["usage_per_call"] = planner_usage
    info = run_to_end(spec)
    assert (info.status, info.stop_reason) == ("failed", reason)
    assert info.tool_calls == tool_calls
    stopped = facts.events(engine, info.run_id, "run.stopped")
    assert len(stopped) == 1
    budget = stopped[0].details["budget"]
    assert {"step", "model_calls", "tool_calls", "tokens", "cost"} <= set(budget)


def test_operator_token_guards_api_grants(client, services, monkeypatch):
    from warrant.runner.errors import Unauthorized

    run_id = client.start_run(sc.spec([CLARIFY]), publish=False)
    monkeypatch.setenv("WARRANT_OPERATOR_TOKEN", "s3cret")
    with pytest.raises(Unauthorized):
        client.add_grant(run_id, capability="memory:write", granted_by="eve")
    with pytest.raises(Unauthorized):
        client.add_grant(
            run_id, capability="memory:write", granted_by="eve", operator_token="guess"
        )
    assert (
        client.add_grant(
            run_id, capability="memory:write", granted_by="ops", operator_token="s3cret"
        )
        > 0
    )


# --- grant constraints on argument values (``Grant.constraints``; 000 §5) ----------------------


def test_a_refund_over_the_grants_cap_is_refused_at_the_gate_and_nothing_is_refunded(
    engine, client, demo, worker, draft_worker
):
    order = f"ord_{time.time_ns()}"
    capped = {
        "capability": "payments:refund",
        "constraints": {"max": {"amount_cents": 10_000}, "in": {"currency": ["EUR"]}},
    }
    spec = sc.spec(
        [
            refund(order, 50_000, pid="r1"),  # over the cap
            refund(order, 2_500, pid="r2"),  # within it
            sc.final("Refunded 25.00 EUR.", "tool-2"),
        ],
        grants=[capped],
    )
    info = client.wait(client.start_run(spec), timeout=30)
    assert (info.status, info.answer) == ("completed", "Refunded 25.00 EUR."), info
    rejected = facts.events(engine, info.run_id, "proposal.rejected")
    assert [(e.details["code"], e.proposal_id) for e in rejected] == [
        ("GRANT_CONSTRAINT_VIOLATED", "r1")
    ]
    assert "amount_cents" in rejected[0].details["message"]
    assert "10000" in rejected[0].details["message"]
    assert facts.commands(engine, info.run_id) == 1  # the refused call never became a command
    assert demo.refund_count(order_id=order) == 1  # only the refund within the cap


def test_an_operators_grant_carries_constraints_and_dropping_them_is_a_widening(
    engine, client, demo, worker, draft_worker
):
    import json as json_lib

    from tests.integration.test_cli import warrant
    from tests.integration.test_grant_wait import _settled_after

    order = f"ord_{time.time_ns()}"
    spec = sc.spec([refund(order, 50_000, pid="r1"), CLARIFY], grants=[])
    spec["policy"] = {"on_missing_grant": "ask"}
    info = client.wait(client.start_run(spec), timeout=30)
    assert (info.status, info.waiting_for_grant["code"]) == ("waiting_grant", "MISSING_CAPABILITY")
    # the operator grants refunds up to 100.00 only, over the command line
    capped = json_lib.dumps({"max": {"amount_cents": 10_000}})
    granted = warrant(
        "run", "grant", info.run_id, "--capability", "payments:refund", "--by", "ops",
        "--constraints", capped, "--json",
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    info = _settled_after(client, info.run_id, info.version)
    assert info.status == "needs_input", info  # refused, re-planned: the planner asks
    rejected = facts.events(engine, info.run_id, "proposal.rejected")
    assert [e.details["code"] for e in rejected][-1] == "GRANT_CONSTRAINT_VIOLATED"
    assert demo.refund_count(order_id=order) == 0
    # the same grant without the limit allows more: refused unless widened on purpose
    widening = warrant(
        "run", "grant", info.run_id, "--capability", "payments:refund", "--by", "ops", "--json"
    )
    assert json_lib.loads(widening.stdout)["error"]["code"] == "GRANT_WIDENING_REFUSED"
    bad = warrant(
        "run", "grant", info.run_id, "--capability", "payments:refund", "--by", "ops",
        "--constraints", '{"max": {"amount_cents": "lots"}}', "--json",
    )  # fmt: skip
    assert json_lib.loads(bad.stdout)["error"]["code"] == "SPEC_INVALID"
    assert demo.refund_count(order_id=order) == 0
