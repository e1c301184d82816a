"""A batch tool's attempt (:mod:`warrant.tools.batches`): only the items not applied yet are
passed to the tool, and its report is merged with the earlier attempts' into one outcome."""

from __future__ import annotations

from typing import Any

from warrant.broker.context import StageContext
from warrant.runner.codes import Outcome, StopReason
from warrant.tools import batches
from warrant.tools.contract import Tool

__all__ = ["BatchCall", "prepare"]


class BatchCall:
    """One attempt of a batch tool: the items it is given, and how its report concludes."""

    def __init__(self, tool: Tool[Any, Any], arguments: dict[str, Any], reports: list[Any]):
        assert tool.batch is not None
        self.batch, self.arguments, self.reports = tool.batch, arguments, reports
        self.applied = batches.applied_keys(reports)
        self.given = batches.narrowed(self.batch, arguments, self.applied)

    @property
    def nothing_left(self) -> bool:
        return not self.given[self.batch.items]

    def conclude(self, status: Outcome, output: dict[str, Any] | None) -> dict[str, Any]:
        """The attempt's outcome fields (status, code, retryable, message, output, stop) from
        what the tool returned (``output`` with ``items``) merged with the earlier reports."""
        now = (output or {}).get("items") or [] if status is Outcome.SUCCEEDED else []
        items = batches.merged(self.batch, self.arguments, self.reports, now)
        found = batches.verdict(items)
        fields: dict[str, Any] = {
            "status": Outcome(found.outcome),
            "code": found.code,
            "retryable": found.retryable,
            "message": found.message,
            "output": {**(output or {}), "items": items},
            "stop": None,
        }
        if found.outcome == Outcome.UNKNOWN.value:
            fields["stop"] = StopReason.UNKNOWN_EFFECT
            fields["trigger"] = "batch-item"
        return fields


def prepare(
    ctx: StageContext,
    tool: Tool[Any, Any],
    command_id: str,
    arguments: dict[str, Any],
    *,
    attempt: int,
) -> BatchCall | None:
    """The batch view of an attempt (None for a tool that is no batch tool). The first
    attempt of a command has no earlier reports (no read)."""
    if tool.batch is None:
        return None
    reports = ctx.tool_deps.item_reports(command_id) if attempt > 1 else []
    return BatchCall(tool, arguments, reports)
