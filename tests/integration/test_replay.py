"""Replay and policy review on real services: recorded runs decided again by today's gate or
a candidate policy, with dry tools (the payment service never hears of a replay)."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import select
from typer.testing import CliRunner
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_tool_execution import LOOKUP, REFUND, refund
from warrant.ledger.db import session_scope
from warrant.ledger.models import Run
from warrant.runner.cli import app
from warrant.runner.client.ledger_verify import verify
from warrant.runner.errors import InvalidRequest, RunNotFound

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.usefixtures("draft_worker")]

#: The demo's refund, relaxed in the suite (``WARRANT_RELAX_CONFIRMATION``): it runs with no
#: confirmation; this candidate makes every call of it wait for a person.
CONFIRM_REFUNDS = {
    "name": "refunds-confirmed",
    "contracts": {"issue_refund": {"confirmation": "per-call"}},
}


def order() -> str:
    return f"ord_{uuid.uuid4().hex[:10]}"


def refunds_run(run_to_end, first: str, second: str):
    """A run that refunds two orders (steps 1 and 2, unattended today) and answers."""
    spec = sc.spec(
        [refund(first, pid="p1"), refund(second, pid="p2"), sc.final("Both refunded.", "tool-2")],
        grants=[LOOKUP, REFUND],
    )
    info = run_to_end(spec)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    return info


def test_a_replay_requiring_a_confirmation_names_the_steps_that_would_wait_and_calls_no_service(
    engine, client, demo, run_to_end
):
    first, second = order(), order()
    info = refunds_run(run_to_end, first, second)
    assert demo.refund_count(order_id=first) == demo.refund_count(order_id=second) == 1
    calls = demo.call_count("issue_refund")

    out = client.replay_run(info.run_id, candidate=CONFIRM_REFUNDS, by="auditor")

    waits = [
        (s["step"], s["tool"]) for s in out["steps"] if s["change"] == "confirmation_now_needed"
    ]
    assert waits == [(1, "issue_refund"), (2, "issue_refund")]
    assert out["changed"] == 2 and out["executed"] == 0
    # the dry tools answered from the recorded outcomes; the service heard nothing
    assert [s["outcome"]["status"] for s in out["steps"]] == ["succeeded", "succeeded"]
    assert demo.call_count("issue_refund") == calls
    assert demo.refund_count(order_id=first) == demo.refund_count(order_id=second) == 1
    # the replay is a run of kind replay, linked to its source, ended REPLAYED, with a trace
    with session_scope(engine) as s:
        replay = s.get(Run, out["replay_run_id"])
        assert replay is not None
        assert (replay.kind, replay.source_run_id) == ("replay", info.run_id)
        assert (replay.status, replay.stop_reason) == ("completed", "REPLAYED")
        assert s.scalar(select(Run.tool_calls).where(Run.id == replay.id)) == 0
    steps = facts.events(engine, out["replay_run_id"], "replay.step")
    assert [e.details["change"] for e in steps] == ["confirmation_now_needed"] * 2
    assert facts.events(engine, out["replay_run_id"], "replay.finished")[0].details["executed"] == 0
    # nothing was published for it: it has no proposals, commands or outcomes of its own
    assert facts.outcomes(engine, out["replay_run_id"]) == 0
    assert verify(engine, out["replay_run_id"])["intact"]  # its trace is on the chain


def test_a_replay_under_todays_policy_changes_nothing(client, demo, run_to_end):
    info = refunds_run(run_to_end, order(), order())
    out = client.replay_run(info.run_id)
    assert out["policy"] == "current"
    assert [s["change"] for s in out["steps"]] == [None, None]
    assert [s["now"]["decision"] for s in out["steps"]] == ["accepted", "accepted"]


def test_a_replay_of_a_refused_step_shows_it_accepted_when_the_candidate_grants_no_less(
    client, run_to_end
):
    # the run holds no refund grant: step 1 is refused MISSING_CAPABILITY, then and now
    spec = sc.spec([refund(order(), pid="p1"), sc.final("Could not.", "user-1")], grants=[LOOKUP])
    info = run_to_end(spec)
    out = client.replay_run(info.run_id)
    assert [(s["recorded"]["code"], s["now"]["code"], s["change"]) for s in out["steps"]] == [
        ("MISSING_CAPABILITY", "MISSING_CAPABILITY", None)
    ]
    # a candidate that takes the capability off the tool: accepted now
    lifted = {"contracts": {"issue_refund": {"capabilities": []}}}
    out = client.replay_run(info.run_id, candidate=lifted)
    assert [(s["now"]["decision"], s["change"]) for s in out["steps"]] == [
        ("accepted", "accepted_now")
    ]
    assert out["steps"][0]["outcome"] is None  # it never ran: the dry tool has no answer


def test_replay_refuses_a_replay_an_unknown_run_and_a_bad_candidate(client, run_to_end):
    info = refunds_run(run_to_end, order(), order())
    out = client.replay_run(info.run_id)
    with pytest.raises(InvalidRequest) as bad:
        client.replay_run(out["replay_run_id"])
    assert bad.value.code == "REPLAY_SOURCE_INVALID"
    with pytest.raises(RunNotFound):
        client.replay_run(str(uuid.uuid4()))
    for candidate in ({"contracts": {"no_such_tool": {"confirmation": "per-call"}}}, {"colour": 1}):
        with pytest.raises(InvalidRequest) as bad:
            client.replay_run(info.run_id, candidate=candidate)
        assert bad.value.code == "CANDIDATE_INVALID"


def test_policy_diff_over_fifty_recorded_runs_names_the_changed_decisions(
    client, run_to_end, tmp_path
):
    refunding, reading = [], []
    for n in range(50):
        if n % 5 == 0:  # ten runs refund (two calls each); forty only answer from the goal
            refunding.append(refunds_run(run_to_end, order(), order()).run_id)
        else:  # forty read twice and answer
            reading.append(run_to_end(sc.read_steps(2)).run_id)
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(CONFIRM_REFUNDS))

    result = CliRunner().invoke(
        app, ["policy", "diff", "--since", "1h", "--candidate", str(candidate), "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["policy"] == "refunds-confirmed" and out["runs"] >= 50
    # other tests' runs may be in the window too: these are the changes that name ours
    ours = set(refunding)
    waits = [c for c in out["changes"] if set(c["runs"]) & ours]
    assert [(c["tool"], c["change"], c["recorded_code"], c["code"]) for c in waits] == [
        ("issue_refund", "confirmation_now_needed", None, None)
    ]
    assert ours <= set(waits[0]["runs"])
    assert not set(reading) & {r for c in out["changes"] for r in c["runs"]}
    mine = [s for s in waits[0]["steps"] if s["run_id"] in ours]
    assert sorted(s["step"] for s in mine) == [1] * 10 + [2] * 10
    assert out["decisions"] >= 10 * 2 + 40 * 2


def test_run_replay_and_policy_diff_on_the_command_line(client, run_to_end, tmp_path):
    info = refunds_run(run_to_end, order(), order())
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(CONFIRM_REFUNDS))
    result = CliRunner().invoke(
        app, ["run", "replay", info.run_id, "--candidate", str(candidate), "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["source_run_id"] == info.run_id and out["changed"] == 2
    result = CliRunner().invoke(app, ["run", "replay", info.run_id])
    assert result.exit_code == 0, result.output
    assert "0 of 2 decision(s) would change; nothing executed" in " ".join(result.output.split())
    candidate.write_text("{not json")
    result = CliRunner().invoke(
        app, ["policy", "diff", "--since", "1h", "--candidate", str(candidate), "--json"]
    )
    assert result.exit_code != 0
    assert json.loads(result.stdout)["error"]["code"] == "CANDIDATE_INVALID"
    result = CliRunner().invoke(app, ["policy", "diff", "--since", "soon", "--json"])
    assert json.loads(result.stdout)["error"]["code"] == "DURATION_INVALID"


def test_replay_and_policy_diff_over_http_are_an_operators(engine, client, run_to_end):
    from tests.integration.test_http_api import LiveServer
    from warrant.runner.client.remote import RemoteClient
    from warrant.runner.client.tokens import Tokens
    from warrant.runner.server.http import create_app

    info = refunds_run(run_to_end, order(), order())
    suffix = uuid.uuid4().hex[:6]
    operator, _ = Tokens(engine).create(f"replay-op-{suffix}", "operator", created_by="tests")
    producer, _ = Tokens(engine).create(f"replay-pr-{suffix}", "producer", created_by="tests")
    with LiveServer(create_app(client=client)) as server:
        with RemoteClient(server.url, operator) as remote:
            out = remote.replay_run(info.run_id, candidate=CONFIRM_REFUNDS)
            assert [s["change"] for s in out["steps"]] == ["confirmation_now_needed"] * 2
            diff = remote.policy_diff(since_s=3600, candidate=CONFIRM_REFUNDS, limit=500)
            assert info.run_id in {r for c in diff["changes"] for r in c["runs"]}
        with RemoteClient(server.url, producer) as remote:
            with pytest.raises(Exception) as refused:
                remote.replay_run(info.run_id)
            assert getattr(refused.value, "code", None) == "FORBIDDEN"
    with session_scope(engine) as s:
        replay = s.get(Run, out["replay_run_id"])
        assert replay is not None and replay.started_by == f"replay-op-{suffix} (operator)"


def test_a_provenance_rule_relaxed_to_ask_turns_a_refused_notice_into_one_a_person_is_asked(
    client, demo, run_to_end
):
    from tests.integration.test_reconciler import NOTICES, notice, spec

    # the model writes an address nothing the run read holds: refused UNTRUSTED_DESTINATION
    stranger = f"{uuid.uuid4().hex[:8]}@example.com"
    info = run_to_end(spec([notice(stranger), sc.final("Sent.", "tool-1")], grants=[NOTICES]))
    asking = {"contracts": {"send_notice": {"untrusted": {"destinations": "ask"}}}}
    out = client.replay_run(info.run_id, candidate=asking)
    [step] = out["steps"]
    assert (step["recorded"]["code"], step["now"]["decision"]) == ("UNTRUSTED_DESTINATION", "asked")
    assert (step["change"], step["now"]["flagged"]) == ("confirmation_now_needed", True)
    assert demo.notice_count(recipient=stranger) == 0
    with pytest.raises(InvalidRequest) as bad:
        client.replay_run(
            info.run_id,
            candidate={"contracts": {"send_notice": {"untrusted": {"destinations": "maybe"}}}},
        )
    assert bad.value.code == "CANDIDATE_INVALID"
