"""The pure cost rules (warrant.runner.costs): prices, estimates, the completion cap."""

from __future__ import annotations

import pytest

from warrant.runner import costs
from warrant.runner.errors import SpecError
from warrant.runner.spec import Budgets, parse_run_spec

PRICES = {"priced": {"prompt_per_1k": 0.5, "completion_per_1k": 1.0}}
PRICE = costs.price_of(PRICES, "priced")


def _spec(model: str, **budgets: object):
    return parse_run_spec(
        {
            "goal": "g",
            "subject": "s",
            "planner": {"kind": "openai", "model": model, "base_url": "http://127.0.0.1:1/v1"},
            "budgets": budgets,
        }
    )


def test_a_cost_cap_needs_a_price_unless_unpriced_calls_are_free():
    with pytest.raises(SpecError) as refused:
        costs.check_priced(_spec("other", max_cost=1), PRICES)
    assert "'other'" in str(refused.value)
    assert refused.value.errors == [{"field": "planner.model", "message": str(refused.value)}]
    costs.check_priced(_spec("other", max_cost=1, unpriced_calls_free=True), PRICES)
    costs.check_priced(_spec("priced", max_cost=1), PRICES)
    costs.check_priced(_spec("other"), PRICES)  # no cap, nothing to enforce


def test_reported_usage_is_kept_and_missing_counts_are_estimated():
    reported = costs.estimated_usage(
        {"prompt_tokens": 900, "completion_tokens": 200}, prompt_tokens=5, message={}, price=PRICE
    )
    assert (reported.prompt_tokens, reported.completion_tokens) == (900, 200)
    assert reported.cost == pytest.approx(0.65) and not reported.estimated
    message = {"role": "assistant", "content": "x" * 400}
    missing = costs.estimated_usage(None, prompt_tokens=300, message=message, price=PRICE)
    assert missing.estimated and missing.prompt_tokens == 300
    assert missing.completion_tokens == costs.estimated_tokens(message) > 100
    assert missing.cost == pytest.approx(PRICE.of(300, missing.completion_tokens))
    part = costs.estimated_usage(
        {"prompt_tokens": 10, "completion_tokens": "many"},
        prompt_tokens=1,
        message="abcd" * 8,
        price=PRICE,
    )
    assert (part.prompt_tokens, part.completion_tokens, part.estimated) == (10, 8, True)
    abandoned = costs.estimated_usage(
        None, prompt_tokens=40, message=None, price=PRICE, completion=False
    )
    assert (abandoned.prompt_tokens, abandoned.completion_tokens) == (40, 0)
    assert abandoned.estimated


@pytest.mark.parametrize(
    ("budgets", "used", "expected"),
    [
        ({}, (0, 0.0), costs.BudgetLeft(4096)),
        ({"max_tokens": 3000}, (0, 0.0), costs.BudgetLeft(2000)),
        ({"max_tokens": 100_000}, (0, 0.0), costs.BudgetLeft(4096)),
        ({"max_tokens": 1020}, (0, 0.0), costs.BudgetLeft(20, "MAX_TOKENS_REACHED")),
        ({"max_cost": 2.0}, (0, 0.5), costs.BudgetLeft(1000)),
        (
            {"max_cost": 2.0, "max_tokens": 1500},
            (0, 0.5),
            costs.BudgetLeft(500),
        ),
        ({"max_cost": 0.4}, (0, 0.0), costs.BudgetLeft(0, "MAX_COST_REACHED")),
    ],
)
def test_the_completion_cap(budgets, used, expected):
    left = costs.completion_cap(
        Budgets(**budgets),
        tokens_used=used[0],
        cost_used=used[1],
        prompt_tokens=1000,
        price=PRICE,
        per_call=4096,
    )
    assert left == expected
    assert (left.max_tokens < costs.MIN_COMPLETION_TOKENS) == (expected.max_tokens < 32)


def test_a_tools_reports_add_up_and_bad_values_are_refused():
    from warrant.tools._contract import ToolContext, ToolUsage

    ctx = ToolContext(
        run_id="r",
        command_id="c",
        subject="s",
        idempotency_token="t",
        attempt=1,
        deadline_at=0.0,
        deps=None,
    )
    assert not ctx.reported_usage
    ctx.report_usage(tokens=5, cost=0.25)
    ctx.report_usage(cost=0.5)
    assert ctx.reported_usage == ToolUsage(5, 0.75)
    for bad in ({"tokens": -1}, {"tokens": 1.5}, {"cost": -0.1}, {"cost": float("nan")}):
        with pytest.raises(ValueError):
            ctx.report_usage(**bad)  # type: ignore[arg-type]
    assert ctx.reported_usage == ToolUsage(5, 0.75)
