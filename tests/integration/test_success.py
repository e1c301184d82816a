"""A spec's success conditions (what done means) on real Celery workers, Redis and PostgreSQL:
a final answer completes the run only when the ledger shows the declared call succeeded or the
declared artifact stored; else it is refused SUCCESS_CONDITION_NOT_MET, re-planned within
max_refused_finals, and the run stops with that reason, never ``completed``."""

from __future__ import annotations

import uuid

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_external_proposals import external_spec
from tests.integration.test_tool_execution import DRAFTS, LOOKUP, draft, lookup, uid
from warrant.runner.errors import SpecError

pytestmark = [pytest.mark.services, pytest.mark.slow]

REPORT = "run-output/report.md"
ARTIFACTS = {"capability": "artifact:write", "resource_scope": "run-output/*"}


def write(path: str = REPORT, pid: str = "p2") -> dict:
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "write_artifact",
        "tool_version": "1",
        "arguments": {"path": path, "content": "the report"},
        "reason_summary": "the goal asks for the report",
        "source_observation_ids": ["user-1"],
    }


def wrote(path: str = REPORT) -> dict:
    return {"kind": "tool_succeeded", "tool": "write_artifact", "arguments": {"path": path}}


def spec(outputs, *conditions, grants=(sc.SEARCH_GRANT, ARTIFACTS), **budgets) -> dict:
    data = sc.spec(list(outputs), grants=list(grants), **budgets)
    data["success"] = {"all_of": list(conditions)}
    return data


def observations(client, run_id: str) -> dict[str, dict]:
    return {o["observation_id"]: o["content"] for o in client.observations(run_id)}


def test_a_refused_write_and_a_final_citing_a_lookup_never_complete(client, engine, run_to_end):
    """The issue's case: the required write is outside the grants, so the gate refuses it;
    the planner answers citing its lookup. Each final is refused, and the run fails."""
    narrow = {"capability": "artifact:write", "resource_scope": "run-output/drafts/*"}
    cites_lookup = sc.final("Report written.", "tool-1")
    outputs = [sc.search("p1"), write(), cites_lookup, cites_lookup, cites_lookup]
    info = run_to_end(
        spec(outputs, wrote(), grants=(sc.SEARCH_GRANT, narrow), max_refused_finals=2)
    )
    assert (info.status, info.stop_reason) == ("failed", "SUCCESS_CONDITION_NOT_MET"), info
    assert (info.step, info.model_calls, info.tool_calls) == (5, 5, 1)
    assert info.answer is None
    assert facts.rejection_codes(engine, info.run_id) == [
        "RESOURCE_OUT_OF_SCOPE",
        "SUCCESS_CONDITION_NOT_MET",
        "SUCCESS_CONDITION_NOT_MET",
    ]
    seen = observations(client, info.run_id)
    for refused in ("policy-3", "policy-4"):
        assert seen[refused]["code"] == "SUCCESS_CONDITION_NOT_MET"
        assert seen[refused]["layer"] == "final"
        assert seen[refused]["unmet"] == [
            {"index": 0, "condition": wrote(), "why": "no_succeeded_call"}
        ]
    assert "policy-5" not in seen  # the last one ended the run
    stopped = facts.events(engine, info.run_id, "run.stopped")
    assert stopped[-1].details["reason"] == "SUCCESS_CONDITION_NOT_MET", stopped[-1].details
    for event in facts.events(engine, info.run_id, "proposal.rejected")[1:]:
        assert REPORT not in str(event.details)  # the trace names the tool, never the path
        assert event.details["unmet"][0]["tool"] == "write_artifact"
    assert not facts.events(engine, info.run_id, "final.validated")


def test_the_declared_write_succeeds_and_the_final_completes(run_to_end, engine):
    outputs = [sc.search("p1"), write(), sc.final("Report written.", "tool-2")]
    info = run_to_end(spec(outputs, wrote(), {"kind": "artifact_exists", "path": REPORT}))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    assert info.answer == "Report written."
    assert facts.rejection_codes(engine, info.run_id) == []


def test_a_final_after_a_write_with_other_arguments_is_refused_then_the_right_one_completes(
    client, run_to_end
):
    outputs = [
        write("run-output/other.md", pid="p1"),
        sc.final("Written.", "tool-1"),
        write(pid="p3"),
        sc.final("Written.", "tool-3"),
    ]
    info = run_to_end(spec(outputs, wrote(), max_refused_finals=1))
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    refused = observations(client, info.run_id)["policy-2"]
    assert refused["code"] == "SUCCESS_CONDITION_NOT_MET"
    assert [u["why"] for u in refused["unmet"]] == ["arguments_differ"]


def test_other_arguments_with_no_round_left_fail_the_run_at_once(run_to_end):
    outputs = [write("run-output/other.md", pid="p1"), sc.final("Written.", "tool-1")]
    info = run_to_end(spec(outputs, wrote(), max_refused_finals=0))
    assert (info.status, info.stop_reason) == ("failed", "SUCCESS_CONDITION_NOT_MET"), info
    assert info.model_calls == 2


def test_an_artifact_condition_reads_the_store(client, engine, run_to_end):
    wanted = f"run-output/{uuid.uuid4().hex[:8]}.md"
    exists = {"kind": "artifact_exists", "path": wanted}
    done = run_to_end(spec([write(wanted, pid="p1"), sc.final("Stored.", "tool-1")], exists))
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), done
    # a write elsewhere stores no artifact at the declared path: refused, then the run fails
    elsewhere = [
        write(REPORT, pid="p1"),
        sc.final("Stored.", "tool-1"),
        sc.final("Stored, really.", "tool-1"),
    ]
    info = run_to_end(spec(elsewhere, exists, max_refused_finals=1))
    assert (info.status, info.stop_reason) == ("failed", "SUCCESS_CONDITION_NOT_MET"), info
    refused = observations(client, info.run_id)["policy-2"]
    assert refused["unmet"] == [{"index": 0, "condition": exists, "why": "no_artifact"}]
    assert facts.commands(engine, info.run_id) == 1


def test_a_declaration_naming_a_tool_the_registry_lacks_is_refused_at_start(client):
    data = spec([], {"kind": "tool_succeeded", "tool": "write_artefact"})
    with pytest.raises(SpecError) as caught:
        client.start_run(data)
    assert caught.value.errors[0]["field"] == "success.all_of.0.tool"
    unknown_field = spec([], {**wrote(), "arguments": {"file": REPORT}})
    with pytest.raises(SpecError) as caught:
        client.start_run(unknown_field)
    assert caught.value.errors[0]["field"] == "success.all_of.0.arguments"


def test_an_external_final_is_refused_until_the_condition_holds(client, worker, draft_worker):
    draft_id = uid("d")
    saved = {"kind": "tool_succeeded", "tool": "save_draft", "arguments": {"draft_id": draft_id}}
    data = external_spec(grants=[LOOKUP, DRAFTS], max_refused_finals=2)
    data["success"] = {"all_of": [saved]}
    run_id = client.start_run(data)
    looked = client.propose(run_id, lookup(), by="agent", wait_s=20)
    assert (looked.state, looked.outcome) == ("executed", "succeeded"), looked
    early = client.propose(run_id, sc.final("Drafted.", "tool-1"), by="agent", wait_s=20)
    assert (early.step, early.state, early.code) == (2, "refused", "SUCCESS_CONDITION_NOT_MET")
    assert early.message and early.run_status == "running"
    wrong = client.propose(run_id, draft(uid("d"), pid="p3"), by="agent", wait_s=20)
    assert (wrong.state, wrong.outcome) == ("executed", "succeeded"), wrong
    still = client.propose(run_id, sc.final("Drafted.", "tool-3"), by="agent", wait_s=20)
    assert (still.state, still.code) == ("refused", "SUCCESS_CONDITION_NOT_MET"), still
    right = client.propose(run_id, draft(draft_id, pid="p5"), by="agent", wait_s=20)
    assert (right.state, right.outcome) == ("executed", "succeeded"), right
    done = client.propose(run_id, sc.final("Drafted.", "tool-5"), by="agent", wait_s=20)
    assert (done.state, done.run_status) == ("completed", "completed"), done
    info = client.get_run(run_id)
    assert (info.stop_reason, info.model_calls) == ("FINAL_ANSWER_VALIDATED", 6)


def test_an_external_final_past_the_refusals_stops_the_run_with_the_reason(client, worker):
    data = external_spec(grants=[LOOKUP], max_refused_finals=0)
    data["success"] = {"all_of": [{"kind": "tool_succeeded", "tool": "save_draft"}]}
    run_id = client.start_run(data)
    client.propose(run_id, lookup(), by="agent", wait_s=20)
    ended = client.propose(run_id, sc.final("Drafted.", "tool-1"), by="agent", wait_s=20)
    assert (ended.state, ended.code, ended.run_status) == (
        "stopped",
        "SUCCESS_CONDITION_NOT_MET",
        "failed",
    ), ended


def test_a_model_planner_is_told_what_done_means(client, worker, fake_openai):
    from tests.integration.test_llm_planner import FINAL, SEARCH_CALL, llm_spec

    model = f"fake-{uuid.uuid4().hex[:8]}"
    fake_openai.script(model, [{"call": SEARCH_CALL}, {"call": FINAL}])
    run = llm_spec(fake_openai, model, max_refused_finals=0)
    run["success"] = {"all_of": [{"kind": "tool_succeeded", "tool": "search_public"}]}
    info = client.wait(client.start_run(run), timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    prompt = fake_openai.requests_for(model)[0]["body"]["messages"][1]["content"]
    assert 'DONE WHEN (checked by the program): [{"kind": "tool_succeeded"' in prompt
    assert '"tool": "search_public"' in prompt


def test_a_condition_only_an_unverified_write_satisfies_completes_flagged(
    client, engine, demo, worker, draft_worker
):
    """``send_notice`` is an unverified write (its service has no status query): a
    ``tool_succeeded`` condition on it still holds, and the completion says the success is
    the tool's word only (stop detail, ``final.validated``, ``run show``'s ``why``)."""
    import json

    from tests.integration.test_cli import warrant

    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    notice = {
        "kind": "tool",
        "proposal_id": "p1",
        "tool": "send_notice",
        "tool_version": "1",
        "arguments": {"recipient": recipient, "body": "Hello."},
        "reason_summary": "the goal asks for it",
        "source_observation_ids": ["user-1"],
    }
    sent = {"kind": "tool_succeeded", "tool": "send_notice"}
    data = spec(
        [notice, sc.final("Sent.", "tool-1")], sent, grants=({"capability": "notices:send"},)
    )
    data["goal"] = f"Send {recipient} the notice 'Hello.'"
    run_id = client.start_run(data)
    info = client.wait(run_id, timeout=30)
    assert info.status == "waiting_confirmation", info
    assert "no status query" in info.confirmation_request["unverified_reason"]
    client.confirm(run_id, proposal_hash=info.confirmation_request["proposal_hash"], by="alice")
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    flagged = [{"index": 0, "tool": "send_notice", "verified": False}]
    [validated] = facts.events(engine, run_id, "final.validated")
    assert validated.details["unverified"] == flagged
    shown = warrant("run", "show", run_id, "--json")
    assert json.loads(shown.stdout)["why"]["unverified_success"] == flagged
    text = " ".join(warrant("run", "show", run_id).stdout.split())
    assert "holds on the tool's word only" in text


def test_an_external_final_on_an_unverified_writes_word_completes_flagged(
    client, engine, demo, worker, draft_worker
):
    """The same for an agent's own loop (planner kind ``external``): its final answer
    completes, and the completion says which condition holds on the tool's word only."""
    from tests.integration.test_reconciler import notice

    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    data = external_spec(grants=[{"capability": "notices:send"}])
    data["success"] = {"all_of": [{"kind": "tool_succeeded", "tool": "send_notice"}]}
    run_id = client.start_run(data)
    waiting = client.propose(run_id, notice(recipient), by="agent", wait_s=20)
    assert waiting.state == "awaiting_confirmation", waiting
    client.confirm(run_id, proposal_hash=waiting.proposal_hash, by="alice")
    sent = client.decision(run_id, 1, wait_s=20, seen="awaiting_confirmation")
    if sent.state == "pending":
        sent = client.decision(run_id, 1, wait_s=20)
    assert (sent.state, sent.outcome) == ("executed", "succeeded"), sent
    done = client.propose(run_id, sc.final("Sent.", "tool-1"), by="agent", wait_s=20)
    assert (done.state, done.run_status) == ("completed", "completed"), done
    [validated] = facts.events(engine, run_id, "final.validated")
    assert validated.details["unverified"] == [
        {"index": 0, "tool": "send_notice", "verified": False}
    ]
