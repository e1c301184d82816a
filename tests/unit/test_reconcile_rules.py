"""What the reconciler does with a tool's answer (runner/tool_outcomes.py)."""

from __future__ import annotations

import pytest

from warrant.runner.tool_outcomes import (
    Answer,
    Next,
    ask_again_in,
    batch_answer,
    item_status,
    late_effect_to_a_person,
    may_still_be_applying,
    next_step,
)


@pytest.mark.parametrize(
    ("answer", "run_waits", "tries", "expected"),
    [
        (Answer.APPLIED, True, 1, Next.APPLY),
        (Answer.NOT_APPLIED, True, 1, Next.RETRY_OR_STOP),
        (Answer.APPLIED, False, 1, Next.RECORD),
        (Answer.NOT_APPLIED, False, 5, Next.RECORD),
        (Answer.UNSUPPORTED, True, 1, Next.TO_A_PERSON),
        (Answer.UNKNOWN, True, 4, Next.ASK_AGAIN),
        (Answer.ERROR, True, 4, Next.ASK_AGAIN),
        (Answer.UNKNOWN, True, 5, Next.TO_A_PERSON),
        (Answer.ERROR, True, 6, Next.TO_A_PERSON),
        # the run moved on: an unknown answer still counts towards a person
        (Answer.UNKNOWN, False, 5, Next.TO_A_PERSON),
    ],
)
def test_next_step(answer: Answer, run_waits: bool, tries: int, expected: Next) -> None:
    assert next_step(answer, run_waits=run_waits, tries=tries, max_tries=5) == expected


def test_only_an_applied_effect_after_the_run_ended_goes_to_a_person() -> None:
    assert late_effect_to_a_person(Answer.APPLIED, run_ended=True)
    assert not late_effect_to_a_person(Answer.APPLIED, run_ended=False)
    assert not late_effect_to_a_person(Answer.NOT_APPLIED, run_ended=True)


def test_not_applied_waits_for_an_attempt_someone_else_declared_lost() -> None:
    lost = "WORKER_LOST_DURING_EXECUTION"
    assert may_still_be_applying(code=lost, attempts=2, outcome_attempt=2)
    assert may_still_be_applying(code="COMMAND_LEASE_EXPIRED", attempts=1, outcome_attempt=1)
    # a later attempt was issued, or the attempt itself said unknown
    assert not may_still_be_applying(code=lost, attempts=3, outcome_attempt=2)
    assert not may_still_be_applying(code="TOOL_TIMEOUT", attempts=1, outcome_attempt=1)


def test_ask_again_backs_off_and_is_bounded() -> None:
    delays = [ask_again_in(n) for n in range(1, 30)]
    assert all(0.5 <= d <= 300.0 for d in delays)
    assert max(delays) > 10 * min(delays)


def test_a_batch_answer_from_its_items() -> None:
    assert [item_status(x) for x in (True, False, None)] == ["applied", "failed", "unknown"]
    assert batch_answer("succeeded") == Answer.APPLIED
    assert batch_answer("unknown") == Answer.UNKNOWN
    assert batch_answer("failed") == Answer.NOT_APPLIED
