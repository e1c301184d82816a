"""Batch tools' pure rules (warrant.tools._batches): which items a retry is given, how the
attempts' reports merge, and what the merged items make of the outcome."""

from __future__ import annotations

from warrant.tools._batches import (
    Batch,
    applied_keys,
    item_token,
    merged,
    narrowed,
    verdict,
)

BATCH = Batch(items="payouts", key="id")
ARGS = {"payouts": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "memo": "x"}


def item(key: str, status: str, **more):
    return {"key": key, "status": status, **more}


def test_item_tokens_are_stable_and_distinct():
    assert item_token("t", "a") == item_token("t", "a")
    assert len({item_token("t", "a"), item_token("t", "b"), item_token("u", "a")}) == 3


def test_a_retry_is_given_only_the_items_not_applied():
    reports = [{"items": [item("a", "applied"), item("b", "failed", retryable=True)]}, None]
    applied = applied_keys(reports)
    assert applied == {"a"}
    assert narrowed(BATCH, ARGS, applied) == {"payouts": [{"id": "b"}, {"id": "c"}], "memo": "x"}


def test_reports_merge_in_the_calls_order_and_an_untried_item_is_not_attempted():
    earlier = [{"items": [item("c", "applied"), item("a", "failed", retryable=True)]}]
    items = merged(BATCH, ARGS, earlier, [item("a", "applied")])
    assert [(i["key"], i["status"]) for i in items] == [
        ("a", "applied"),
        ("b", "failed"),
        ("c", "applied"),
    ]
    assert items[1]["code"] == "NOT_ATTEMPTED" and items[1]["retryable"] is True


def test_the_verdict_follows_the_items():
    applied = [item("a", "applied"), item("b", "applied")]
    assert verdict(applied).outcome == "succeeded"
    unknown = verdict([item("a", "applied"), item("b", "unknown")])
    assert (unknown.outcome, unknown.code) == ("unknown", "BATCH_ITEMS_UNKNOWN")
    retry = verdict([item("a", "applied"), item("b", "failed", retryable=True)])
    assert (retry.outcome, retry.code, retry.retryable) == ("failed", "BATCH_ITEMS_FAILED", True)
    partial = verdict([item("a", "applied"), item("b", "rejected")])
    assert (partial.outcome, partial.code, partial.retryable) == (
        "failed",
        "BATCH_PARTIALLY_APPLIED",
        False,
    )
    assert partial.message == "1 of 2 items applied"
    assert verdict([item("a", "rejected")]).code == "BATCH_FAILED"
