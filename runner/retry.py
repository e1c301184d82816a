"""Retry policy for retryable tool failures: pure decisions, no sleeping here.

Only ``failed`` outcomes marked ``retryable`` are retried; the delay is exponential backoff
with full jitter unless the tool said ``retry_after``; a retry must fit the attempt limit,
the tool-call budget and the run deadline (delay plus the attempt's own time limit).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["RetryDecision", "backoff_delay", "decide_retry"]


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
