"""What the reconciler does with a tool's answer about an unknown effect: pure decisions.

``broker/reconciler/_effects.py`` asks the tool (``reconcile(idempotency_token)``), locks the
outcome, its run and command, and then carries out what these functions decide:

- the run no longer waits on the effect (a person has it, or it ended): record the answer;
  an effect found applied after the run ended goes to a person;
- ``applied`` → the real outcome, the run goes on;
- ``not_applied`` → retry the same command and token, or stop (``tool_outcomes``), but only
  once no attempt can still be applying it;
- no ``reconcile`` hook, or still unknown too many times → a person; else ask again later.
"""

from __future__ import annotations

from enum import StrEnum

from warrant.runner.retry import backoff_delay

__all__ = [
    "Answer",
    "Next",
    "ask_again_in",
    "batch_answer",
    "item_status",
    "late_effect_to_a_person",
    "may_still_be_applying",
    "next_step",
]


class Answer(StrEnum):
    """The tool's answer, as the reconciler records it (``reconciliations.result``)."""

    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    UNKNOWN = "unknown"
    ERROR = "error"
    """The status query itself failed."""
    UNSUPPORTED = "unsupported"
    """The tool has no ``reconcile`` hook (or is no longer registered)."""


class Next(StrEnum):
    """What the reconciler does with an answer."""

    RECORD = "record"
    """The run moved on: record the answer (a late applied effect also goes to a person)."""
    APPLY = "apply"
    RETRY_OR_STOP = "retry_or_stop"
    TO_A_PERSON = "to_a_person"
    ASK_AGAIN = "ask_again"


#: Unknown outcomes recorded by someone other than the attempt itself (the attempt may not
#: have noticed that it was declared lost, and may still be applying the effect).
RECORDED_FOR_THE_ATTEMPT = frozenset({"WORKER_LOST_DURING_EXECUTION", "COMMAND_LEASE_EXPIRED"})


def next_step(answer: Answer, *, run_waits: bool, tries: int, max_tries: int) -> Next:
    """``run_waits``: the run is reconciling or cancelling on this effect; ``tries``: the
    reconciliations counted so far, this one included."""
    known = answer in (Answer.APPLIED, Answer.NOT_APPLIED)
    if known and not run_waits:
        return Next.RECORD
    if answer == Answer.APPLIED:
        return Next.APPLY
    if answer == Answer.NOT_APPLIED:
        return Next.RETRY_OR_STOP
    if answer == Answer.UNSUPPORTED or tries >= max_tries:
        return Next.TO_A_PERSON
    return Next.ASK_AGAIN


def late_effect_to_a_person(answer: Answer, *, run_ended: bool) -> bool:
    """An effect found applied after its run ended is a person's to look at."""
    return answer == Answer.APPLIED and run_ended


def may_still_be_applying(*, code: str | None, attempts: int, outcome_attempt: int) -> bool:
    """Could the attempt this unknown outcome stands for still be running? Only when someone
    else declared it lost and no later attempt was issued: then "not applied" must wait for
    that attempt's hard limit before it is believed."""
    return code in RECORDED_FOR_THE_ATTEMPT and attempts == outcome_attempt


def ask_again_in(tries: int) -> float:
    """Seconds until a still-unknown effect is asked about again."""
    return max(0.5, backoff_delay(tries, base_s=2.0, cap_s=300.0))


def item_status(applied: bool | None) -> str:
    """A batch item's status from its own reconcile answer."""
    return {True: "applied", False: "failed", None: "unknown"}[applied]


def batch_answer(outcome: str) -> Answer:
    """A batch's answer from the verdict over its items (all applied → applied, any still
    unknown → unknown, else not applied: the retry is given only the items not applied)."""
    return {
        "succeeded": Answer.APPLIED,
        "unknown": Answer.UNKNOWN,
        "failed": Answer.NOT_APPLIED,
    }[outcome]
