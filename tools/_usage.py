"""What a tool call reports it consumed (:meth:`~warrant.tools._contract.ToolContext.report_usage`):
charged to the run's ``max_tokens`` and ``max_cost`` budgets with the call's outcome."""

from __future__ import annotations

__layer__ = "pure core"

from dataclasses import dataclass

__all__ = ["ToolUsage", "UsageMeter"]


@dataclass(frozen=True)
class ToolUsage:
    """What a tool call consumed that the run pays for (a paid API, a model the tool asked),
    as the tool reported it with :meth:`ToolContext.report_usage`."""

    tokens: int = 0
    cost: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.tokens or self.cost)


class UsageMeter:
    """The usage one call reports, added up (a tool may report more than once)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.cost = 0.0

    def add(self, tokens: int, cost: float) -> None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"report_usage: tokens must be a whole number >= 0, not {tokens!r}")
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < 1e12:
            raise ValueError(f"report_usage: cost must be a finite number >= 0, not {cost!r}")
        self.tokens += tokens
        self.cost += float(cost)

    @property
    def total(self) -> ToolUsage:
        return ToolUsage(self.tokens, self.cost)
