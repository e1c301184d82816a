"""Batch tools: one call, many items, each applied (or not) on its own.

A tool whose contract declares ``batch=Batch(items="payouts", key="payout_id")`` takes a list
argument ``items`` whose elements each carry a unique ``key``. Each item has its own
idempotency key, :meth:`ToolContext.item_token` of its key (derived from the command's token:
stable across attempts, distinct per item). The tool's output model has a field ``items``: a
list of :class:`ItemResult`, one per item it was given.

The worker merges what each attempt reported (``items`` of the command's outcomes):

- every item ``applied`` → ``succeeded``;
- an item ``unknown`` → ``unknown`` (the reconciler asks ``reconcile(item_token)`` for each item
  not known applied);
- an item ``failed`` and ``retryable`` → a retry of the same command that is given only the
  items not applied (``BATCH_ITEMS_FAILED``);
- otherwise ``failed`` with ``BATCH_PARTIALLY_APPLIED`` (some items applied) or
  ``BATCH_FAILED``: the planner sees every item's status and goes on.

The gate checks every element of the list against the grants' scopes (``resources`` of the
contract, as for any list argument).
"""

from __future__ import annotations

__layer__ = "pure core"

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from warrant.runner.canonical import sha256_hex

__all__ = [
    "Batch",
    "BatchVerdict",
    "ItemResult",
    "ItemStatus",
    "applied_keys",
    "item_token",
    "merged",
    "narrowed",
    "verdict",
]


@dataclass(frozen=True, kw_only=True)
class Batch:
    items: str
    """The argument that lists the items."""
    key: str
    """The field of each item that names it (unique within the call)."""


class ItemStatus(StrEnum):
    APPLIED = "applied"
    FAILED = "failed"
    """Known not applied (``retryable`` says whether trying again may help)."""
    REJECTED = "rejected"
    UNKNOWN = "unknown"


class ItemResult(BaseModel):
    """What a batch tool reports about one item."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    key: str
    """The item's key."""
    status: ItemStatus
    """applied, failed, rejected or unknown."""
    code: str | None = None
    """For a failure or refusal: a stable code."""
    message: str | None = None
    retryable: bool = False
    output: dict[str, Any] | None = None
    """What the service returned for the item (its id, ...)."""


def item_token(token: str, key: str) -> str:
    """An item's idempotency key: stable for the command, distinct per item."""
    return sha256_hex(f"{token}\x1f{key}")


def keys_of(batch: Batch, arguments: Mapping[str, Any]) -> list[str]:
    return [str(item[batch.key]) for item in arguments.get(batch.items) or []]


def applied_keys(reports: Iterable[Mapping[str, Any] | None]) -> set[str]:
    """Keys applied in any earlier report (an outcome's or a reconciliation's ``items``)."""
    return {
        str(item.get("key"))
        for report in reports
        for item in (report or {}).get("items") or []
        if isinstance(item, Mapping) and item.get("status") == ItemStatus.APPLIED.value
    }


def narrowed(batch: Batch, arguments: Mapping[str, Any], applied: set[str]) -> dict[str, Any]:
    """The arguments with only the items not applied yet."""
    items = [i for i in arguments.get(batch.items) or [] if str(i[batch.key]) not in applied]
    return {**arguments, batch.items: items}


def merged(
    batch: Batch,
    arguments: Mapping[str, Any],
    earlier: Iterable[Mapping[str, Any] | None],
    now: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Every item of the command, in its order: this attempt's report, else the earliest
    report that found it applied, else ``failed`` (not tried: ``NOT_ATTEMPTED``)."""
    found: dict[str, dict[str, Any]] = {}
    for report in earlier:
        for item in (report or {}).get("items") or []:
            if item.get("status") == ItemStatus.APPLIED.value:
                found.setdefault(str(item["key"]), dict(item))
    for item in now:
        found[str(item["key"])] = dict(item)
    missing = {"status": ItemStatus.FAILED.value, "code": "NOT_ATTEMPTED", "retryable": True}
    return [found.get(key, {"key": key, **missing}) for key in keys_of(batch, arguments)]


@dataclass(frozen=True)
class BatchVerdict:
    outcome: str
    """succeeded, unknown, failed."""
    code: str | None
    retryable: bool
    message: str | None


def verdict(items: list[dict[str, Any]]) -> BatchVerdict:
    statuses = [i.get("status") for i in items]
    applied = statuses.count(ItemStatus.APPLIED.value)
    if applied == len(items):
        return BatchVerdict("succeeded", None, False, None)
    said = f"{applied} of {len(items)} items applied"
    if ItemStatus.UNKNOWN.value in statuses:
        return BatchVerdict("unknown", "BATCH_ITEMS_UNKNOWN", False, said)
    if any(i.get("status") == ItemStatus.FAILED.value and i.get("retryable") for i in items):
        return BatchVerdict("failed", "BATCH_ITEMS_FAILED", True, said)
    code = "BATCH_PARTIALLY_APPLIED" if applied else "BATCH_FAILED"
    return BatchVerdict("failed", code, False, said)
