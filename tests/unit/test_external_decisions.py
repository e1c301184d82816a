"""What a caller is told: decisions read from a step's facts, and how the MCP gateway and the
adapters word them. An unknown effect is never a success."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from warrant.contrib._tools import failure_text, succeeded
from warrant.runner.external import Decision, decision_of, explain


def facts(
    *,
    status: str = "running",
    step: int = 1,
    pending: bool = False,
    proposal: dict[str, Any] | None = None,
    command: dict[str, Any] | None = None,
    outcome: dict[str, Any] | None = None,
    refusal: dict[str, Any] | None = None,
) -> Any:
    base = {
        "proposal_id": "p1",
        "kind": "tool",
        "tool": "save_draft",
        "tool_version": "1",
        "raw": {"arguments": {"a": 1}},
        "status": "accepted",
        "rejection_code": None,
        "proposal_hash": "h" * 64,
        "confirmation_request": None,
    }
    run = {
        "status": status,
        "phase": "planning",
        "step": step,
        "version": 5,
        "stop_reason": None,
        "answer": None,
        "planner": "external",
        "pending": pending,
    }
    return SimpleNamespace(
        run=run,
        proposal=None if proposal is None else {**base, **proposal},
        command=command,
        outcome=outcome,
        refusal=refusal,
    )


def test_no_proposal_yet_is_pending():
    assert decision_of("r", 1, facts(proposal=None)).state == "pending"


def test_a_refusal_carries_the_gates_code_and_words():
    d = decision_of(
        "r",
        1,
        facts(
            proposal={"status": "rejected", "rejection_code": "MISSING_CAPABILITY"},
            refusal={"code": "MISSING_CAPABILITY", "layer": "authorization"},
        ),
    )
    assert (d.state, d.code, d.settled) == ("refused", "MISSING_CAPABILITY", True)
    assert "authorization" in (d.message or "")
    assert d.arguments == {"a": 1}


def test_a_proposal_waiting_for_a_person_names_its_hash():
    d = decision_of(
        "r",
        1,
        facts(
            status="waiting_confirmation",
            pending=True,
            proposal={"status": "waiting_confirmation", "confirmation_request": {"x": 1}},
        ),
    )
    assert (d.state, d.proposal_hash, d.settled) == ("awaiting_confirmation", "h" * 64, False)
    assert "WAITING_FOR_APPROVAL" in failure_text(d)


@pytest.mark.parametrize("resolved", [None, "applied", "handoff"])
def test_an_unknown_effect_stays_unknown_to_the_caller(resolved):
    d = decision_of(
        "r",
        1,
        facts(
            status="reconciling",
            proposal={"status": "accepted"},
            command={"id": "c", "status": "completed", "attempts": 1, "step": 1},
            outcome={
                "status": "unknown",
                "code": "SERVICE_TIMEOUT",
                "message": "lost",
                "output": None,
                "resolved_status": resolved,
            },
        ),
    )
    assert (d.state, d.outcome, d.resolved) == ("executed", "unknown", resolved)
    assert not succeeded(d) and failure_text(d).startswith("UNKNOWN_EFFECT")


@pytest.mark.parametrize("command_status", ["issued", "started"])
def test_a_command_in_flight_is_pending_even_after_an_earlier_attempts_outcome(command_status):
    earlier = {"status": "failed", "code": "T", "message": "", "output": None}
    d = decision_of(
        "r",
        1,
        facts(
            command={"id": "c", "status": command_status, "attempts": 2, "step": 1},
            outcome={**earlier, "resolved_status": None},
        ),
    )
    assert d.state == "pending"


def test_a_stop_at_the_step_is_stopped_with_its_reason():
    f = facts(status="failed", proposal={"status": "stopped"})
    f.run["stop_reason"] = "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    d = decision_of("r", 1, f)
    assert (d.state, d.code) == ("stopped", "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION")


def test_an_mcp_result_is_a_success_only_for_a_success():
    from warrant.runner.server.mcp_gateway import result_of

    ok = Decision(run_id="r", step=1, state="executed", outcome="succeeded", output={"a": 1})
    assert result_of(ok).isError is False and result_of(ok).structuredContent == {"a": 1}
    for d in (
        Decision(run_id="r", step=1, state="executed", outcome="unknown"),
        Decision(run_id="r", step=1, state="executed", outcome="failed", code="X"),
        Decision(run_id="r", step=1, state="refused", code="MISSING_CAPABILITY"),
        Decision(run_id="r", step=1, state="pending"),
        Decision(run_id="r", step=1, state="stopped", code="MAX_STEPS_REACHED"),
    ):
        result = result_of(d)
        assert result.isError is True, d
        assert result.structuredContent["warrant"]["code"], d
    unknown = result_of(Decision(run_id="r", step=1, state="executed", outcome="unknown"))
    assert unknown.content[0].text.startswith("UNKNOWN_EFFECT")


@pytest.mark.parametrize(("resolved", "observation"), [(None, "tool-3"), ("succeeded", "job-3")])
def test_an_accepted_job_is_not_a_success_until_it_ends(resolved, observation):
    d = decision_of(
        "r",
        3,
        facts(
            step=3,
            proposal={},
            command={"status": "completed", "step": 3},
            outcome={
                "status": "accepted",
                "code": None,
                "message": None,
                "output": {"operation_id": "rj_9"},
                "resolved_status": resolved,
            },
        ),
    )
    assert (d.state, d.outcome, d.resolved, d.observation_id) == (
        "executed",
        "accepted",
        resolved,
        observation,
    )
    if resolved is None:
        code, said = explain(d)
        assert code == "JOB_ACCEPTED" and "rj_9" in said and "job-3" in said
        assert not succeeded(d)
