"""Long-running tools' pure rules: an acceptance is not evidence, a job tool needs no verify
warning, and the contract's listing says what kind of tool it is."""

from __future__ import annotations

from warrant_demo.tools_jobs import PAYOUT_BATCH, REFUND_ASYNC

from warrant.runner.codes import ObservationKind, StopReason
from warrant.runner.spec import FinalAnswer
from warrant.runner.step_decisions import Complete, validate_final
from warrant.runner.views import ObservationView


def result(observation_id: str, status: str) -> ObservationView:
    return ObservationView(
        observation_id=observation_id,
        kind=ObservationKind.TOOL_RESULT,
        step=1,
        **ObservationView.flags(status),
    )


def test_a_final_answer_citing_an_acceptance_fails_and_says_it_was_unfinished():
    seen = [result("tool-1", "accepted"), result("job-1", "succeeded")]
    cites_acceptance = validate_final(
        FinalAnswer(kind="final", answer="done", citations=["tool-1"]), seen
    )
    assert not isinstance(cites_acceptance, Complete)
    assert cites_acceptance.reason is StopReason.FINAL_CITATION_VALIDATION_FAILED
    assert cites_acceptance.detail == {"citations": 1, "unresolved": 1, "unfinished": 1}
    cites_end = validate_final(FinalAnswer(kind="final", answer="done", citations=["job-1"]), seen)
    assert isinstance(cites_end, Complete)


def test_long_running_and_batch_tools_say_so_and_are_not_unchecked_writes():
    assert REFUND_ASYNC.warnings == [] and PAYOUT_BATCH.warnings == []
    assert REFUND_ASYNC.describe()["longRunning"] is True
    assert PAYOUT_BATCH.describe()["batch"] == {"items": "payouts", "key": "payout_id"}
    assert PAYOUT_BATCH.describe()["longRunning"] is False
