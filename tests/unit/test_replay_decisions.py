"""The replay's comparison of a recorded decision with today's (pure)."""

from __future__ import annotations

import pytest

from warrant.runner.errors import InvalidRequest
from warrant.runner.replay import CHANGES, PolicyCandidate, _change


def then(decision: str, code: str | None = None, *, asked: bool = False) -> dict:
    return {"decision": decision, "code": code, "asked": asked}


def now(decision: str, code: str | None = None, *, flagged: bool = False) -> dict:
    return {"decision": decision, "code": code, "asks": decision == "asked", "flagged": flagged}


@pytest.mark.parametrize(
    ("recorded", "today", "change"),
    [
        (then("accepted"), now("accepted"), None),
        (then("accepted"), now("asked"), "confirmation_now_needed"),
        (then("accepted", asked=True), now("accepted"), "confirmation_no_longer_needed"),
        (then("accepted", asked=True), now("asked"), None),
        (then("refused", "CONFIRMATION_DECLINED", asked=True), now("asked"), None),
        (then("accepted"), now("refused", "MISSING_CAPABILITY"), "refused_now"),
        (then("accepted", asked=True), now("refused", "SCOPE_DENIED"), "refused_now"),
        (then("refused", "MISSING_CAPABILITY"), now("accepted"), "accepted_now"),
        (then("refused", "MISSING_CAPABILITY"), now("asked"), "confirmation_now_needed"),
        (then("refused", "A"), now("refused", "B"), "code_changed"),
        (then("refused", "A"), now("refused", "A"), None),
        (then("accepted"), now("halted", "MAX_TOOL_CALLS_REACHED"), "halted_now"),
        (then("halted"), now("accepted"), "no_longer_halted"),
        (then("accepted"), now("accepted", flagged=True), "provenance_flagged_now"),
    ],
)
def test_each_pair_of_decisions_has_one_change(recorded, today, change):
    assert _change(recorded, today, False) == change
    assert change is None or change in CHANGES


def test_a_flag_recorded_then_is_no_change():
    assert _change(then("accepted"), now("accepted", flagged=True), True) is None


def test_a_candidate_is_json_of_its_shape():
    parsed = PolicyCandidate.parse(b'{"contracts": {"pay": {"confirmation": "per-call"}}}')
    assert parsed.contracts["pay"].confirmation == "per-call"
    for bad in (b"{", b'{"contracts": {"pay": {"confirmation": "sometimes"}}}', b'{"x": 1}'):
        with pytest.raises(InvalidRequest) as refused:
            PolicyCandidate.parse(bad)
        assert refused.value.code == "CANDIDATE_INVALID"


def test_a_run_that_cannot_be_replayed_is_listed_not_the_end_of_the_review():
    from warrant.runner.replay import RecordedRun, ReplayPolicy, replay_runs
    from warrant.tools._registry import Registry

    def run(run_id: str, budgets: dict) -> RecordedRun:
        return RecordedRun(
            run_id=run_id,
            kind="live",
            status="completed",
            goal="g",
            subject="s",
            spec={"budgets": budgets},
            deadline_at=0.0,
            proposals=(),
            commands=(),
            observations=(),
            grants=(),
        )

    reports, failures = replay_runs(
        [run("ok", {}), run("odd", {"max_steps": "many"})], ReplayPolicy(registry=Registry([]))
    )
    assert [r.run_id for r in reports] == ["ok"]
    assert [f["run_id"] for f in failures] == ["odd"]
    assert failures[0]["error"].startswith("ValidationError")
