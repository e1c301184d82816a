"""The decision events carry the fields the design texts name (issue 54, item 5): each event's
builder, pure."""

from __future__ import annotations

from tests.gate import gate, proposal
from warrant.ledger.memory_views import budget_left, built_event
from warrant.runner import policy
from warrant.runner.canonical import canonical_json, content_hash, raw_arguments_hash, sha256_hex
from warrant.runner.gate import cited_sources, source_observation_ids
from warrant.runner.memory_view import ObservationRecord, build_view
from warrant.runner.tool_outcomes import postcondition_checked


def _view():
    goal = ObservationRecord(
        observation_id="user-1", kind="user", source="user", step=0, content={"goal": "g"}
    )
    tools = [{"name": "search_public", "version": "1", "description": "", "inputSchema": {}}]
    budgets = {
        "steps_left": 4,
        "model_calls_left": 3,
        "tool_calls_left": 2,
        "tokens_left": None,
        "cost_left": 0.5,
        "deadline_at": 1_000.0,
    }
    return build_view(
        run_id="r", step=1, observations=[goal], tools=tools, budgets=budgets, preferences={}
    )


def test_observation_built_names_the_state_version_the_tools_offered_and_the_budget_left():
    name, details = built_event(_view(), state_version=7, now=990.25)
    assert name == "observation.built"
    assert details["state_version"] == 7
    assert details["tools_offered"] == ["search_public"]
    assert details["budget_left"] == {
        "steps": 4,
        "model_calls": 3,
        "tool_calls": 2,
        "tokens": None,
        "cost": 0.5,
        "time_s": 9.75,
    }
    assert budget_left({"deadline_at": 5.0}, now=9.0) == {"time_s": 0.0}  # never negative


def test_proposal_received_hashes_the_arguments_as_received():
    raw = proposal("search_public", {"query": "retries", "n": 2})
    assert raw_arguments_hash(raw) == content_hash({"n": 2, "query": "retries"})
    calls = [proposal("search_public")]
    assert raw_arguments_hash({"kind": "parallel", "calls": calls}) == content_hash(calls)
    assert raw_arguments_hash({"kind": "final", "answer": "x"}) is None
    assert raw_arguments_hash("not an object") is None
    odd = {"kind": "tool", "arguments": {"x": float("nan")}}  # no canonical form: still hashed
    assert raw_arguments_hash(odd) is not None and len(raw_arguments_hash(odd) or "") == 64
    assert raw_arguments_hash(raw) == sha256_hex(canonical_json(raw["arguments"]))


def test_postcondition_checked_names_its_evidence():
    name, details = postcondition_checked(
        "refund", ok=False, attempts=3, command_id="c-1", attempt=2, output={"refund_id": "r9"}
    )
    assert name == "tool.postcondition.checked"
    assert details == {
        "tool": "refund",
        "ok": False,
        "attempts": 3,
        "evidence": {
            "command_id": "c-1",
            "attempt": 2,
            "output_hash": content_hash({"refund_id": "r9"}),
        },
    }


def test_proposal_rejected_names_the_observations_the_proposal_came_from():
    raw = proposal("no_such_tool", source_observation_ids=["tool-2", "user-1", "tool-2", 5])
    decision = policy.evaluate(gate(raw))
    assert isinstance(decision, policy.Reject)
    [rejected] = [e for e in decision.events if e.name == "proposal.rejected"]
    assert rejected.details["source_observation_ids"] == ["tool-2", "user-1"]
    final = {"kind": "final", "answer": "a", "citations": ["tool-1"]}
    assert cited_sources(final) == ["tool-1"]
    both = {"kind": "parallel", "calls": [proposal(source_observation_ids=["tool-1"]), 3]}
    assert cited_sources(both) == ["tool-1"]
    assert cited_sources({"kind": "tool", "source_observation_ids": "tool-1"}) == []
    found = {
        "origins": {"to[0]": {"origin": "vouched", "observation_id": "tool-3.messages[2]"}},
        "refused": [{"observation_id": "tool-1"}],
        "flagged": [],
    }
    assert source_observation_ids(found) == ["tool-3", "tool-1"]
