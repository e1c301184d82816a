"""What a model call costs, the pure part: prices, estimates, the completion cap.

* **Prices** come from the deployment (``WARRANT_MODEL_PRICES``: per model, ``prompt_per_1k``
  and ``completion_per_1k``). A run with ``max_cost`` whose model has no price is refused at
  start (:func:`check_priced`, ``SPEC_INVALID`` naming the model), unless its budgets say
  ``unpriced_calls_free``: an unpriced call would cost 0 and the cap would protect nothing.
* **Time**: a model timeout longer than the whole deadline is refused at start
  (:func:`deadline_fit`, ``SPEC_INVALID`` naming both); a worst case (every model call of
  the budget taking its whole timeout) past the deadline is a warning in ``run.created``.
* **Estimates**: a reply that reports no ``usage`` (or only part of it) is charged by
  :func:`estimated_usage`: the request's JSON characters / 4 for the prompt and the reply
  message's JSON characters / 4 for the completion (:data:`CHARS_PER_TOKEN`), priced like
  reported tokens, and marked ``estimated`` (traced as ``model.usage.estimated``).
* **The completion cap** (:func:`completion_cap`): each request carries
  ``max_tokens = min(the planner's max_completion_tokens, what the token and cost budgets
  leave after the prompt)``, so one long completion cannot overshoot the budget. When the
  budgets leave less than :data:`MIN_COMPLETION_TOKENS`, nothing is sent and the run stops
  ``MAX_TOKENS_REACHED`` or ``MAX_COST_REACHED``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.errors import SpecError
from warrant.runner.spec import Budgets, OpenAIPlannerSpec, RouterPlannerSpec, RunSpec, Usage

__all__ = [
    "CHARS_PER_TOKEN",
    "MIN_COMPLETION_TOKENS",
    "BudgetLeft",
    "Price",
    "check_priced",
    "completion_cap",
    "deadline_fit",
    "estimated_tokens",
    "estimated_usage",
    "price_of",
]

#: The estimate's ratio of characters to tokens (English text and JSON average about 4).
CHARS_PER_TOKEN = 4
#: The smallest completion worth asking for: one function call with its arguments needs more.
MIN_COMPLETION_TOKENS = 32


@dataclass(frozen=True)
class Price:
    """A model's price per 1,000 tokens (0: free, or unpriced)."""

    prompt_per_1k: float = 0.0
    completion_per_1k: float = 0.0
    known: bool = False
    """The price table names the model."""

    def of(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens / 1000 * self.prompt_per_1k
            + completion_tokens / 1000 * self.completion_per_1k
        )


def price_of(prices: Mapping[str, Mapping[str, float]], model: str) -> Price:
    entry = prices.get(model)
    if entry is None:
        return Price()
    return Price(
        prompt_per_1k=float(entry.get("prompt_per_1k", 0.0)),
        completion_per_1k=float(entry.get("completion_per_1k", 0.0)),
        known=True,
    )


def unpriced(budgets: Budgets, planner: Any, prices: Mapping[str, Mapping[str, float]]) -> bool:
    """A cost cap that an OpenAI-compatible planner's unpriced model would never reach."""
    return (
        budgets.max_cost is not None
        and not budgets.unpriced_calls_free
        and isinstance(planner, OpenAIPlannerSpec)
        and not price_of(prices, planner.model).known
    )


def check_priced(spec: RunSpec, prices: Mapping[str, Mapping[str, float]]) -> None:
    """Refuse (``SPEC_INVALID`` naming the model) a ``max_cost`` the price table cannot
    enforce."""
    if unpriced(spec.budgets, spec.planner, prices):
        assert isinstance(spec.planner, OpenAIPlannerSpec)
        message = (
            f"budgets.max_cost is set but model {spec.planner.model!r} has no price in "
            "WARRANT_MODEL_PRICES: price it, or set budgets.unpriced_calls_free"
        )
        raise SpecError(message, errors=[{"field": "planner.model", "message": message}])


def deadline_fit(spec: RunSpec) -> dict[str, Any] | None:
    """The spec's model timeout against its deadline (text B §13: a call's own timeout must
    not exceed the run's remaining deadline; text A §7.1: the worst case is the model calls
    times their timeout). One request's ``timeout_s`` longer than the whole ``deadline_s``
    can never be honoured: :class:`SpecError` (``SPEC_INVALID``) naming both. A worst case
    (``max_model_calls`` times ``timeout_s``) past the deadline only means the budget cannot all
    be spent in time: returned as a warning for the run's trace (``run.created``). ``None``:
    it fits, or the planner sets no timeout (fixture, external, plug-in kinds)."""
    planner: Any = spec.planner
    field = "planner.timeout_s"
    if isinstance(planner, RouterPlannerSpec):
        planner, field = planner.classifier, "planner.classifier.timeout_s"
    if not isinstance(planner, OpenAIPlannerSpec):
        return None
    timeout, deadline = planner.timeout_s, spec.budgets.deadline_s
    if timeout > deadline:
        message = (
            f"{field} {timeout:g} s is longer than budgets.deadline_s {deadline:g} s: not even "
            "one model call fits the deadline; lower the timeout or raise the deadline"
        )
        raise SpecError(message, errors=[{"field": field, "message": message}])
    calls = spec.budgets.max_model_calls or 0
    worst = calls * timeout
    if worst <= deadline:
        return None
    return {
        "warning": "worst_case_past_deadline",
        "max_model_calls": calls,
        "timeout_s": timeout,
        "worst_case_s": worst,
        "deadline_s": deadline,
    }


def estimated_tokens(value: Any) -> int:
    """Tokens of a JSON value by the documented estimate (characters / 4, at least 1)."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return max(1, len(text) // CHARS_PER_TOKEN)


def estimated_usage(
    reported: Any, *, prompt_tokens: int, message: Any, price: Price, completion: bool = True
) -> Usage:
    """The call's usage: what the reply reported (``reported``, its ``usage`` object), each
    missing count estimated: the prompt by ``prompt_tokens`` (:func:`estimated_tokens` of the
    request before ``max_tokens`` was added), the completion from the reply's message.
    ``completion=False``: no reply came back (an abandoned call), no completion is charged."""
    usage = reported if isinstance(reported, dict) else {}
    prompt = _count(usage.get("prompt_tokens"))
    answer = _count(usage.get("completion_tokens")) if completion else 0
    estimated = prompt is None or answer is None
    prompt = prompt_tokens if prompt is None else prompt
    answer = estimated_tokens(message) if answer is None else answer
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=answer,
        cost=price.of(prompt, answer),
        estimated=estimated,
    )


def _count(value: Any) -> int | None:
    """A reported token count, or None when there is no usable one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return int(value)


@dataclass(frozen=True)
class BudgetLeft:
    """The completion a request may ask for, or the budget that leaves too little."""

    max_tokens: int
    exhausted: str | None = None
    """``MAX_TOKENS_REACHED`` or ``MAX_COST_REACHED`` when less than
    :data:`MIN_COMPLETION_TOKENS` is left: the request is not sent."""


def completion_cap(
    budgets: Budgets,
    *,
    tokens_used: int,
    cost_used: float,
    prompt_tokens: int,
    price: Price,
    per_call: int,
) -> BudgetLeft:
    """``max_tokens`` for one request: the per-call cap, cut to what the token and cost
    budgets leave once the prompt is paid."""
    cap, exhausted = per_call, None
    if budgets.max_tokens is not None:
        left = budgets.max_tokens - tokens_used - prompt_tokens
        if left < cap:
            cap, exhausted = left, "MAX_TOKENS_REACHED"
    if budgets.max_cost is not None and price.completion_per_1k > 0:
        money = budgets.max_cost - cost_used - price.of(prompt_tokens, 0)
        left = math.floor(money / price.completion_per_1k * 1000)
        if left < cap:
            cap, exhausted = left, "MAX_COST_REACHED"
    if cap < MIN_COMPLETION_TOKENS:
        return BudgetLeft(max(cap, 0), exhausted)
    return BudgetLeft(cap)
