"""Issue 50: an agent's own loop (planner kind ``external``) as a session. Its budget defaults,
loops refused rather than ending the run, a deadline that pauses while a person is asked, one
status per stop reason, and a call to an ungranted tool refused before its schema is read."""

from __future__ import annotations

import dataclasses

import pytest

from tests.gate import NOW, gate, grant, proposal, run
from warrant.runner import policy
from warrant.runner import run_machine as machine
from warrant.runner.canonical import proposal_hash
from warrant.runner.codes import RunStatus, StopReason
from warrant.runner.confirmation_rules import (
    confirmation_wait_over,
    request_clock,
    resumed_deadline,
)
from warrant.runner.errors import SpecError
from warrant.runner.spec import Budgets, parse_run_spec
from warrant.runner.step_decisions import check_before_planning
from warrant.runner.views import HistoryEntry

BASE = {"goal": "help", "subject": "alice"}
EXTERNAL = {**BASE, "planner": {"kind": "external", "agent": "mcp"}}
FIXTURE = {**BASE, "planner": {"kind": "fixture", "outputs": []}}
SESSION = parse_run_spec({**EXTERNAL, "budgets": {"max_steps": 20}}).budgets


def decide(raw, **kw):
    return policy.evaluate(gate(raw, **kw))


# --- 1. the session defaults ------------------------------------------------------------------


def test_an_external_template_with_only_max_steps_gets_the_session_defaults():
    b = SESSION
    assert b.max_steps == 20
    assert b.max_model_calls is None  # the agent's model calls are not warrant's to count
    assert b.max_tool_calls == 40  # twice max_steps: retries count as tool calls
    assert b.deadline_s == 3600 and b.deadline_pauses_for_confirmation
    assert b.on_loop == "refuse"
    assert b.max_steps_without_new_observation == 20  # can never be exceeded: off


def test_fields_the_spec_sets_are_kept_and_other_planners_keep_theirs():
    given = {"max_model_calls": 5, "max_tool_calls": 3, "deadline_s": 60, "on_loop": "stop"}
    b = parse_run_spec({**EXTERNAL, "budgets": given}).budgets
    assert (b.max_model_calls, b.max_tool_calls, b.deadline_s, b.on_loop) == (5, 3, 60, "stop")
    assert b.deadline_pauses_for_confirmation  # not set: the session default
    assert parse_run_spec(FIXTURE).budgets == Budgets()
    # the stored spec (every field set) validates to the same budgets
    stored = parse_run_spec({**EXTERNAL, "budgets": {"max_steps": 20}}).model_dump(mode="json")
    assert parse_run_spec(stored).budgets == SESSION


def test_no_model_call_budget_is_only_for_an_agents_own_loop():
    with pytest.raises(SpecError):
        parse_run_spec({**FIXTURE, "budgets": {"max_model_calls": None}})
    assert parse_run_spec({**EXTERNAL, "budgets": {"max_model_calls": None}})


def test_no_model_call_budget_never_stops_a_step():
    view = run(model_calls=500, step=3, budgets=SESSION)
    assert check_before_planning(view, NOW) is None
    capped = dataclasses.replace(view, budgets=Budgets(max_steps=20, max_model_calls=10))
    stop = check_before_planning(capped, NOW)
    assert stop is not None and stop.reason is StopReason.MAX_MODEL_CALLS_REACHED


# --- 2. loops: refused, the run goes on -------------------------------------------------------

REFUSE = Budgets(on_loop="refuse")


def test_a_repeated_call_is_refused_and_the_run_goes_on():
    fp = proposal_hash("search_public", "1", {"query": "retries"})
    same = [HistoryEntry(fingerprint=fp, observation_version=1)] * 2
    d = decide(proposal(), history=same, budgets=REFUSE)
    assert isinstance(d, policy.Reject), d
    assert (d.code, d.layer) == ("REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION", "loop_detection")
    assert d.fingerprint == fp and d.message
    halted = decide(proposal(), history=same)  # other planners: unchanged, the run stops
    assert isinstance(halted, policy.Halt)
    assert halted.reason is StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION


def test_a_cycle_is_refused_and_the_run_goes_on():
    a = proposal_hash("search_public", "1", {"query": "a"})
    b = proposal_hash("search_public", "1", {"query": "b"})
    history = [HistoryEntry(fingerprint=f, observation_version=1) for f in (a, b, a)]
    d = decide(proposal(arguments={"query": "b"}), history=history, budgets=REFUSE)
    assert isinstance(d, policy.Reject) and d.code == "PROPOSAL_OSCILLATION_DETECTED"
    halted = decide(proposal(arguments={"query": "b"}), history=history)
    assert isinstance(halted, policy.Halt)


def test_a_refused_call_repeated_keeps_its_own_code():
    raw = proposal("rm_rf")
    first = decide(raw)
    assert isinstance(first, policy.Reject)
    history = [HistoryEntry(fingerprint=first.fingerprint, observation_version=1)] * 3
    d = decide(raw, history=history, budgets=REFUSE)
    assert isinstance(d, policy.Reject) and d.code == "UNKNOWN_TOOL_OR_VERSION"


def test_steps_without_a_new_observation_still_stop_when_the_spec_sets_them():
    fps = [proposal_hash("search_public", "1", {"query": q}) for q in "abcdefgh"]
    distinct = [HistoryEntry(fingerprint=f, observation_version=1) for f in fps]
    set_by_spec = Budgets(on_loop="refuse", max_steps_without_new_observation=8)
    d = decide(proposal(arguments={"query": "z"}), history=distinct, budgets=set_by_spec)
    assert isinstance(d, policy.Halt) and d.reason is StopReason.STEPS_WITHOUT_NEW_OBSERVATION
    d = decide(proposal(arguments={"query": "z"}), history=distinct, budgets=SESSION)
    assert isinstance(d, policy.Accept)


# --- 3. the deadline pauses while a person is asked; one status per stop reason ---------------


def test_a_paused_deadline_moves_on_by_the_time_waited():
    asked = request_clock(SESSION, deadline_at=NOW + 10, now=NOW)
    assert asked == {"asked_at": NOW, "expires_at": NOW + 900, "deadline_paused": True}
    # five minutes with a person: past the run's deadline, the run still waits
    assert confirmation_wait_over(asked, deadline_at=NOW + 10, now=NOW + 300) is None
    assert resumed_deadline(asked, deadline_at=NOW + 10, now=NOW + 300) == NOW + 310
    expired = confirmation_wait_over(asked, deadline_at=NOW + 10, now=NOW + 900)
    assert expired is not None and expired.status is RunStatus.CANCELLED
    assert expired.reason is StopReason.CONFIRMATION_EXPIRED


def test_a_deadline_that_counts_the_wait_fails_the_run_as_every_deadline_does():
    asked = request_clock(Budgets(), deadline_at=NOW + 10, now=NOW)
    assert asked["expires_at"] == NOW + 10 and not asked["deadline_paused"]
    assert resumed_deadline(asked, deadline_at=NOW + 10, now=NOW + 5) is None
    stop = confirmation_wait_over(asked, deadline_at=NOW + 10, now=NOW + 10)
    assert stop is not None
    assert (stop.status, stop.reason) == (RunStatus.FAILED, StopReason.DEADLINE_REACHED)
    # the same reason, the same status, wherever it is found
    planning = check_before_planning(run(deadline_at=NOW), NOW)
    assert planning is not None and planning.status is stop.status
    gated = decide(proposal(), deadline_at=NOW)
    assert isinstance(gated, policy.Halt) and gated.status is stop.status


def test_resuming_writes_the_moved_deadline():
    waiting = run(status=RunStatus.WAITING_CONFIRMATION, deadline_at=NOW + 10)
    change = machine.resume_after_confirmation(
        waiting, approved=True, decided={"by": "ann"}, deadline_at=NOW + 310
    )
    assert change.changes["deadline_at"].timestamp() == NOW + 310
    assert dict(change.events)["confirmation.approved"]["deadline_moved_s"] == 300
    plain = machine.resume_after_confirmation(waiting, approved=False, decided={"by": "ann"})
    assert "deadline_at" not in plain.changes


# --- 4. a call to an ungranted tool is refused before its schema is read ----------------------


def test_bad_arguments_to_an_ungranted_tool_get_the_authorization_code():
    bad = proposal("write_artifact", {"path": 7, "sudo": True})
    d = decide(bad)  # the run holds search:public only
    assert isinstance(d, policy.Reject)
    assert (d.code, d.layer) == ("MISSING_CAPABILITY", "authorization")
    names = [e.name for e in d.events]
    assert "proposal.schema.validated" not in names
    assert names[:3] == [
        "proposal.parsed",
        "proposal.registry.checked",
        "policy.capability.checked",
    ]
    # granted (whatever the scope): the schema speaks first, resource scopes stay after it
    scoped = [grant("artifact:write", "docs/*")]
    assert decide(bad, grants=scoped).code == "UNKNOWN_INPUT_FIELD"
    good = proposal("write_artifact", {"path": "run-output/a.md", "content": "x"})
    assert decide(good, grants=scoped).code == "RESOURCE_OUT_OF_SCOPE"


def test_observe_mode_still_traces_a_missing_grant_once_and_reads_the_schema():
    def observing(raw):
        return policy.evaluate(dataclasses.replace(gate(raw), observed=frozenset({"*"})))

    bad = observing(proposal("write_artifact", {"path": 7}))
    assert isinstance(bad, policy.Reject) and bad.code.startswith("INVALID_")
    good = observing(proposal("write_artifact", {"path": "run-output/a.md", "content": "x"}))
    refusals = [e for e in good.events if e.name == "gate.would_refuse"]
    assert [e.details["code"] for e in refusals] == ["MISSING_CAPABILITY"]
