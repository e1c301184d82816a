"""Retry policy for retryable tool and model failures: pure decisions, no sleeping here.

Only ``failed`` outcomes marked ``retryable`` are retried; the delay is exponential backoff
with full jitter unless the tool said ``retry_after``; a retry must fit the attempt limit,
the tool-call budget and the run deadline (delay plus the attempt's own time limit).

A model that is busy or down (a 429, a 5xx, a timeout, no connection) makes the planner raise
:class:`PlannerRetryLater`; the planner stage asks :func:`decide_model_retry` and, instead of
sleeping in its worker, re-publishes the step with that countdown — the process serves other
runs meanwhile. The backoff is computed here rather than with tenacity (which the tool stage's
ledger-write loop uses): tenacity's strategies take a retry loop's call state and draw from the
global random generator, and this is one pure function of the attempt number with a seedable
one.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.codes import ErrorCode
from warrant.runner.planner_protocol import PlannerFailure
from warrant.runner.spec import MAX_INT, Usage
from warrant.runner.views import RunView

__all__ = [
    "DEFAULT_MODEL_ATTEMPTS",
    "MODEL_BACKOFF_BASE_S",
    "MODEL_RETRY_CAP_S",
    "MODEL_RETRY_EVENT",
    "ModelRetries",
    "PlannerRetryLater",
    "RetryDecision",
    "backoff_delay",
    "decide_model_retry",
    "decide_retry",
]

#: Attempts of one planner step when the planner names no bound of its own.
DEFAULT_MODEL_ATTEMPTS = 4
#: Longest wait before a model is asked again, a server's ``Retry-After`` included (the stage
#: caps it further at half the stall window, so the stall sweep never re-publishes a waiting
#: step).
MODEL_RETRY_CAP_S = 30.0
#: First backoff ceiling without a ``Retry-After`` (doubling per attempt, full jitter).
MODEL_BACKOFF_BASE_S = 0.5
#: The trace event of a planner attempt the model did not answer, re-published for later.
MODEL_RETRY_EVENT = "model.retry.scheduled"


class PlannerRetryLater(PlannerFailure):
    """The model cannot answer now but may later: a 429, a 5xx, a timeout, no connection
    (``code`` says which: ``HTTP_429``, ``MODEL_TIMEOUT``, ...). Like temporalio's
    ``ApplicationError(next_retry_delay=...)``: the planner reports, the stage schedules.

    ``retry_after_s`` is the server's hint (``Retry-After``), None without one;
    ``max_attempts`` bounds the attempts of one step (the planner's own retry setting). The
    failed attempt's ``calls`` and ``usage`` are charged like any other."""

    code: str = ErrorCode.PLANNER_RETRY_LATER

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        retry_after_s: float | None = None,
        max_attempts: int = DEFAULT_MODEL_ATTEMPTS,
        usage: Usage | None = None,
        calls: int = 1,
    ) -> None:
        super().__init__(code, message, usage=usage, calls=calls)
        self.retry_after_s = retry_after_s
        self.max_attempts = max_attempts


def backoff_delay(
    attempt: int, *, base_s: float, cap_s: float, rng: random.Random | None = None
) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    ceiling = min(cap_s, base_s * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(0.0, ceiling)


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay_s: float = 0.0
    reason: str = ""
    """Why not: ``attempts``, ``budget`` or ``deadline``."""


def decide_retry(
    *,
    attempt: int,
    max_attempts: int,
    tool_calls: int,
    max_tool_calls: int,
    now: float,
    deadline_at: float,
    attempt_timeout_s: float,
    base_s: float,
    cap_s: float,
    retry_after_s: float | None,
    rng: random.Random | None = None,
) -> RetryDecision:
    if attempt >= max_attempts:
        return RetryDecision(False, reason="attempts")
    if tool_calls >= max_tool_calls:
        return RetryDecision(False, reason="budget")
    delay = (
        retry_after_s
        if retry_after_s is not None
        else backoff_delay(attempt, base_s=base_s, cap_s=cap_s, rng=rng)
    )
    if now + delay + min(attempt_timeout_s, 0.1) >= deadline_at:
        return RetryDecision(False, delay_s=delay, reason="deadline")
    return RetryDecision(True, delay_s=delay)


def decide_model_retry(
    *,
    attempt: int,
    max_attempts: int,
    model_calls: int,
    max_model_calls: int,
    now: float,
    deadline_at: float,
    retry_after_s: float | None,
    cap_s: float = MODEL_RETRY_CAP_S,
    base_s: float = MODEL_BACKOFF_BASE_S,
    rng: random.Random | None = None,
) -> RetryDecision:
    """May attempt ``attempt`` (1-based, just failed) of a planner step be followed by
    another, and after how long? ``model_calls`` counts the failed attempt. The server's
    ``Retry-After`` wins over the backoff, both capped at ``cap_s``; the step must stay
    within its attempts, the model-call budget and the run deadline (``reason`` says which
    one refused: ``attempts``, ``budget``, ``deadline``)."""
    hint = None if retry_after_s is None else min(max(0.0, retry_after_s), cap_s)
    return decide_retry(
        attempt=attempt,
        max_attempts=max_attempts,
        tool_calls=model_calls,
        max_tool_calls=max_model_calls,
        now=now,
        deadline_at=deadline_at,
        attempt_timeout_s=0.1,
        base_s=base_s,
        cap_s=cap_s,
        retry_after_s=hint,
        rng=rng,
    )


@dataclass(frozen=True)
class ModelRetries:
    """The earlier attempts of one planner step (one run version), read back from its
    :data:`MODEL_RETRY_EVENT` events: that is how a re-published step knows its attempt number
    and what the attempts cost (their model calls are charged with the step's commit)."""

    attempts: int = 0
    calls: int = 0
    not_before: float = 0.0
    """When the step may be attempted again (epoch seconds)."""

    @classmethod
    def of(cls, events: Iterable[Mapping[str, Any]]) -> ModelRetries:
        """From the details of the step's retry events."""
        found = list(events)
        return cls(
            attempts=len(found),
            calls=sum(int(d.get("calls") or 0) for d in found),
            not_before=max((float(d.get("not_before") or 0.0) for d in found), default=0.0),
        )

    def decide(
        self,
        later: PlannerRetryLater,
        *,
        run: RunView,
        now: float,
        cap_s: float,
        rng: random.Random | None = None,
    ) -> RetryDecision:
        """After this attempt (``run.model_calls`` counts the attempts before it)."""
        return decide_model_retry(
            attempt=self.attempts + 1,
            max_attempts=later.max_attempts,
            model_calls=run.model_calls + later.calls,
            max_model_calls=(
                run.budgets.max_model_calls if run.budgets.max_model_calls is not None else MAX_INT
            ),
            now=now,
            deadline_at=run.deadline_at,
            retry_after_s=later.retry_after_s,
            cap_s=cap_s,
            rng=rng,
        )

    def event(
        self, later: PlannerRetryLater, decision: RetryDecision, *, version: int, now: float
    ) -> dict[str, Any]:
        """The details of this attempt's :data:`MODEL_RETRY_EVENT`."""
        delay = round(decision.delay_s, 3)
        return {
            "version": version,
            "attempt": self.attempts + 1,
            "code": later.code,
            "calls": later.calls,
            "retry_after_s": later.retry_after_s,
            "delay_s": delay,
            "not_before": now + delay,
        }

    def failure(self, later: PlannerRetryLater, decision: RetryDecision) -> dict[str, Any]:
        """Why the step fails after this attempt: ``code`` (``DEADLINE_REACHED`` when the wait
        would pass the deadline, ``MODEL_CALL_BUDGET``, else the attempt's own), the
        ``attempts`` made and the ``last`` one's code."""
        code = {"deadline": "DEADLINE_REACHED", "budget": "MODEL_CALL_BUDGET"}.get(
            decision.reason, later.code
        )
        return {"code": code, "attempts": self.attempts + 1, "last": later.code}
