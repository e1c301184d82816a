"""The policy gate's layers, as pure functions."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tests.gate import NOW, FetchIn, confirmation, gate, grant, noop_tool, proposal
from warrant.runner import policy
from warrant.runner.canonical import MAX_ECHOED_NAME, echoed_name, proposal_hash
from warrant.runner.codes import Outcome, Phase, RunStatus
from warrant.runner.confirmation_rules import person_decision
from warrant.runner.spec import Budgets
from warrant.runner.tool_stage import switched_off
from warrant.runner.views import HistoryEntry
from warrant.tools._contract import ConfirmationPolicy, SideEffect


def decide(raw, **kw):
    return policy.evaluate(gate(raw, **kw))


def code_of(decision) -> str:
    assert isinstance(decision, policy.Reject), decision
    return decision.code


def test_a_valid_granted_read_is_accepted():
    d = decide(proposal())
    assert isinstance(d, policy.Accept)
    assert d.arguments == {"query": "retries"} and d.resource == "public"
    names = [e.name for e in d.events]
    assert names == [
        "proposal.parsed",
        "proposal.registry.checked",
        "proposal.schema.validated",
        "proposal.semantic.validated",
        "policy.capability.checked",
        "policy.state.checked",
        "policy.loop.checked",
        "policy.confirmation.checked",
        "policy.budget.checked",
    ]


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("not even an object", "PROPOSAL_PARSE_FAILED"),
        ({"kind": "tool", "tool": "search_public"}, "PROPOSAL_PARSE_FAILED"),
        (proposal("rm_rf"), "UNKNOWN_TOOL_OR_VERSION"),
        (proposal(tool_version="2"), "UNKNOWN_TOOL_OR_VERSION"),
        (proposal(arguments=["query"]), "INPUT_NOT_OBJECT"),
        (proposal(arguments={"query": "x", "sudo": True}), "UNKNOWN_INPUT_FIELD"),
        (proposal(arguments={"query": 7}), "INVALID_QUERY"),
        (proposal(arguments={}), "INVALID_QUERY"),
        (proposal(arguments={"query": "x" * 20_000}), "INPUT_TOO_LARGE"),
        (proposal(arguments={"query": "x" * 501}), "INVALID_QUERY"),
    ],
)
def test_refusals_before_any_tool_code(raw, code):
    assert code_of(decide(raw)) == code


def test_an_unknown_tool_name_is_echoed_within_a_bound():
    long_name = "t" * 199 + "z"  # as long as a proposal's tool name may be
    d = decide(proposal(long_name))
    assert code_of(d) == "UNKNOWN_TOOL_OR_VERSION"
    shown = echoed_name(long_name)
    assert len(shown) == MAX_ECHOED_NAME + 1 + 12 and shown.startswith("t" * MAX_ECHOED_NAME)
    assert shown != echoed_name("t" * 200)  # two long names stay told apart
    assert echoed_name("search_public") == "search_public"
    assert d.message is not None and long_name not in d.message and shown in d.message
    for event in d.events:
        assert long_name not in repr(event.details), event
    assert d.events[0].details["tool"] == shown


def test_semantic_codes():
    memory = [grant("memory:write")]
    save = proposal("save_preference", {"key": "auto_approve", "value": "true"})
    assert code_of(decide(save, grants=memory)) == "MEMORY_KEY_NOT_ALLOWED"
    long = proposal("save_preference", {"key": "answer_language", "value": "x" * 41})
    assert code_of(decide(long, grants=memory)) == "MEMORY_VALUE_TOO_LONG"
    for path in ("etc/passwd", "/run-output/a", "run-output/../x", "run-output/"):
        write = proposal("write_artifact", {"path": path, "content": "x"})
        assert (
            code_of(decide(write, grants=[grant("artifact:write")])) == "PATH_OUTSIDE_RUN_OUTPUT"
        ), path


def test_grants_bind_capability_scope_expiry_uses_and_run():
    write = proposal("write_artifact", {"path": "run-output/a.md", "content": "x"})
    assert code_of(decide(write, grants=[])) == "MISSING_CAPABILITY"
    assert (
        code_of(decide(write, grants=[grant("artifact:write", "docs/*")]))
        == "RESOURCE_OUT_OF_SCOPE"
    )
    assert (
        code_of(decide(write, grants=[grant("artifact:write", "run-output/*", expires_at_step=0)]))
        == "GRANT_EXPIRED"
    )
    assert (
        code_of(decide(write, grants=[grant("artifact:write", max_uses=1, uses=1)]))
        == "GRANT_EXHAUSTED"
    )
    assert (
        code_of(decide(write, grants=[grant("artifact:write", run_id="run-2")]))
        == "MISSING_CAPABILITY"
    )
    ok = decide(write, grants=[grant("artifact:write", "run-output/*", expires_at_step=1)])
    assert isinstance(ok, policy.Accept) and ok.grant_ids == (1,)


def test_a_capability_named_in_the_proposal_grants_nothing():
    raw = proposal(
        "save_preference", {"key": "answer_language", "value": "zh"}, capability="memory:write"
    )
    assert code_of(decide(raw, grants=[])) == "PROPOSAL_PARSE_FAILED"
    raw.pop("capability")
    assert code_of(decide(raw, grants=[])) == "MISSING_CAPABILITY"


def test_state_guard_ignores_stale_messages():
    assert isinstance(decide(proposal(), status=RunStatus.CANCELLING), policy.Ignore)
    assert isinstance(decide(proposal(), phase=Phase.TOOL), policy.Ignore)


def test_confirmation_is_bound_to_the_exact_proposal_hash():
    args = {"key": "answer_language", "value": "zh-CN"}
    raw = proposal("save_preference", args)
    grants = [grant("memory:write", "memory:alice/*")]
    waiting = decide(raw, grants=grants)
    assert isinstance(waiting, policy.AwaitConfirmation)
    h = proposal_hash("save_preference", "1", {**args, "expected_version": 0})
    assert waiting.proposal_hash == h
    request = waiting.request()
    assert request["parameters"]["value"] == "<sensitive>"
    assert request["side_effect"] == "idempotent-write"

    ok = decide(raw, grants=grants, confirmations=[confirmation(h)])
    assert isinstance(ok, policy.Accept) and ok.confirmation_id == "c-1"
    other = proposal_hash(
        "save_preference", "1", {"key": "answer_language", "value": "en", "expected_version": 0}
    )
    for c in (
        confirmation(other),
        confirmation(h, used=True),
        confirmation(h, run_id="run-2"),
        confirmation(h, expires_at_step=0),
        confirmation(h, expires_at=NOW - 1),
    ):
        assert isinstance(
            decide(raw, grants=grants, confirmations=[c]), policy.AwaitConfirmation
        ), c
    declined = decide(raw, grants=grants, confirmations=[confirmation(h, approved=False)])
    assert code_of(declined) == "CONFIRMATION_DECLINED"


def test_budget_layer():
    d = decide(proposal(), tool_calls=4, budgets=Budgets(max_tool_calls=4))
    assert isinstance(d, policy.Halt) and d.reason == "MAX_TOOL_CALLS_REACHED"
    per_tool = Budgets(max_tool_calls_per_tool={"search_public": 1})
    d = decide(proposal(), tool_calls_by_tool={"search_public": 1}, budgets=per_tool)
    assert isinstance(d, policy.Halt) and d.detail == {"tool": "search_public"}
    d = decide(proposal(), deadline_at=NOW)
    assert isinstance(d, policy.Halt) and d.reason == "DEADLINE_REACHED"


def test_repeats_without_a_new_observation_stop():
    fp = proposal_hash("search_public", "1", {"query": "retries"})
    same = [HistoryEntry(fingerprint=fp, observation_version=1)] * 2
    d = decide(proposal(), history=same)
    assert isinstance(d, policy.Halt)
    assert d.reason == "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    # A changed observation resets the count.
    older = [HistoryEntry(fingerprint=fp, observation_version=0)] * 2
    assert isinstance(decide(proposal(), history=older), policy.Accept)


def test_repeated_refusals_also_stop():
    raw = proposal("rm_rf")
    first = decide(raw)
    assert isinstance(first, policy.Reject) and first.fingerprint
    history = [HistoryEntry(fingerprint=first.fingerprint, observation_version=1)] * 2
    d = decide(raw, history=history)
    assert isinstance(d, policy.Halt) and d.reason == "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"


def test_oscillation_a_b_a_b():
    a = proposal_hash("search_public", "1", {"query": "a"})
    b = proposal_hash("search_public", "1", {"query": "b"})
    history = [HistoryEntry(fingerprint=f, observation_version=1) for f in (a, b, a)]
    d = decide(proposal(arguments={"query": "b"}), history=history)
    assert isinstance(d, policy.Halt) and d.reason == "PROPOSAL_OSCILLATION_DETECTED"
    moved = [
        HistoryEntry(fingerprint=f, observation_version=v) for f, v in ((a, 0), (b, 1), (a, 1))
    ]
    assert isinstance(decide(proposal(arguments={"query": "b"}), history=moved), policy.Accept)


def _fps(*queries: str) -> list[str]:
    return [proposal_hash("search_public", "1", {"query": q}) for q in queries]


def test_a_cycle_of_three_with_no_new_observation_stops_with_its_period():
    history = [HistoryEntry(fingerprint=f, observation_version=1) for f in _fps(*"abcab")]
    d = decide(proposal(arguments={"query": "c"}), history=history)
    assert isinstance(d, policy.Halt) and d.reason == "PROPOSAL_OSCILLATION_DETECTED"
    assert d.detail["period"] == 3
    # a cycle longer than the spec's max_cycle_period is not one
    short = Budgets(max_cycle_period=2)
    assert isinstance(
        decide(proposal(arguments={"query": "c"}), history=history, budgets=short), policy.Accept
    )


def test_steps_that_add_nothing_stop_whatever_they_are():
    distinct = [HistoryEntry(fingerprint=f, observation_version=1) for f in _fps(*"abcdefgh")]
    d = decide(proposal(arguments={"query": "z"}), history=distinct)
    assert isinstance(d, policy.Halt) and d.reason == "STEPS_WITHOUT_NEW_OBSERVATION"
    assert d.detail["steps"] == 9
    assert isinstance(
        decide(proposal(arguments={"query": "z"}), history=distinct[:7]), policy.Accept
    )
    loose = Budgets(max_steps_without_new_observation=20)
    assert isinstance(
        decide(proposal(arguments={"query": "z"}), history=distinct, budgets=loose), policy.Accept
    )


def _worker(tools: set[str]):
    from warrant.tools._deployment import WorkerInfo

    return WorkerInfo(
        node="tools@h1",
        roles=("tool",),
        queues=("tool.search_public",),
        fingerprint="f",
        tools=frozenset(tools),
    )


def test_the_deployment_reaches_the_gate_as_plain_data():
    # The stage reads the live registrations; the gate needs nothing but that list.
    import dataclasses

    inp = gate(proposal())
    old = dataclasses.replace(inp, deployment=[_worker({"search_public@0"})])
    refused = policy.evaluate(old)
    assert isinstance(refused, policy.Reject)
    assert refused.code == "TOOL_NOT_DEPLOYED"
    assert "tools@h1" in refused.message
    served = dataclasses.replace(inp, deployment=[_worker({"search_public@1"})])
    assert isinstance(policy.evaluate(served), policy.Accept)


# --- the kill switch (an operator's ``warrant tools disable``) -------------------------------


def test_a_disabled_tool_is_refused_right_after_the_registry_layer():
    inp = dataclasses.replace(
        gate(proposal(), grants=[]), disabled={"search_public": "leaking"}, observed=frozenset("*")
    )
    d = policy.evaluate(inp)  # no grant, observe mode: the switch comes first all the same
    assert isinstance(d, policy.Reject) and (d.code, d.layer) == ("TOOL_DISABLED", "kill_switch")
    assert d.message is not None and "leaking" in d.message
    names = [e.name for e in d.events]
    assert names == ["proposal.parsed", "proposal.registry.checked", "proposal.rejected"]
    other = dataclasses.replace(gate(proposal()), disabled={"write_artifact": ""})
    assert isinstance(policy.evaluate(other), policy.Accept)


def test_a_disabled_tools_issued_command_is_refused_at_its_claim_not_a_started_one():
    row = SimpleNamespace(cmd_tool="pay", cmd_tool_disabled=True, cmd_status="issued")
    refused = switched_off(row, claimed=False)
    assert refused is not None and (refused.status, refused.code) == (
        Outcome.REJECTED,
        "TOOL_DISABLED",
    )
    assert switched_off(SimpleNamespace(**{**vars(row), "cmd_status": "started"}), claimed=True)
    assert (
        switched_off(SimpleNamespace(**{**vars(row), "cmd_status": "started"}), claimed=False)
        is None
    )
    assert (
        switched_off(SimpleNamespace(**{**vars(row), "cmd_tool_disabled": False}), claimed=True)
        is None
    )


# --- a per-run confirmation covers the run; a per-call one is used once ----------------------


def _decision(policy_: ConfirmationPolicy, *confirmations, step: int = 5):
    tool = noop_tool("w", SideEffect.IDEMPOTENT_WRITE, FetchIn, confirmation=policy_)
    inp = gate(proposal("w"), confirmations=list(confirmations), step=step)
    return person_decision(tool, policy_, "h2", inp)


def test_a_used_per_run_approval_covers_later_calls_a_per_call_one_does_not():
    used = confirmation("h1", tool="w", used=True, covers_run=True, expires_at_step=1)
    assert _decision(ConfirmationPolicy.PER_RUN, used) == ("ok", "c-1")
    # not asked as per-run (a flagged call's per-call approval), or declined: no cover
    assert _decision(ConfirmationPolicy.PER_RUN, dataclasses.replace(used, covers_run=False)) == (
        "missing",
        None,
    )
    declined = dataclasses.replace(used, approved=False)
    assert _decision(ConfirmationPolicy.PER_RUN, declined) == ("missing", None)
    assert _decision(ConfirmationPolicy.PER_CALL, used) == ("missing", None)
    fresh = confirmation("h2", tool="w")
    assert _decision(ConfirmationPolicy.PER_CALL, fresh) == ("ok", "c-1")
    assert _decision(ConfirmationPolicy.PER_CALL, dataclasses.replace(fresh, used=True)) == (
        "missing",
        None,
    )
    expired = dataclasses.replace(fresh, expires_at_step=1, covers_run=True)
    assert _decision(ConfirmationPolicy.PER_RUN, expired) == ("missing", None)  # never used


def test_the_request_of_an_unverified_write_says_why_it_is_not_read_back():
    """What the approver is shown (the inbox renders it): an ``unverified`` write's reason; a
    write that is read back (``save_preference``) carries none."""
    raw = proposal("send_notice", {"recipient": "ops@example.com", "body": "hi"})
    waiting = decide(raw, grants=[grant("notices:send")])
    assert isinstance(waiting, policy.AwaitConfirmation), waiting
    assert "no status query" in waiting.request()["unverified_reason"]
    args = {"key": "answer_language", "value": "zh-CN"}
    checked = decide(proposal("save_preference", args), grants=[grant("memory:write")])
    assert isinstance(checked, policy.AwaitConfirmation)
    assert "unverified_reason" not in checked.request()
