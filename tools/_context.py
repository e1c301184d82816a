"""What a tool may know about the call it is serving: :class:`ToolContext` (its run, its
idempotency token and attempt, its deadline, its dependencies, its cancellation and the
worker's interruption, and what it reports it consumed)."""

from __future__ import annotations

__layer__ = "pure core"

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from warrant.runner.cancellation import CancelSignal
from warrant.runner.errors import ToolInterrupted
from warrant.tools._batches import item_token

__all__ = ["ToolContext", "ToolUsage", "UsageMeter"]


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


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Everything a tool may know about the call it is serving."""

    run_id: str
    command_id: str
    subject: str
    idempotency_token: str
    attempt: int
    deadline_at: float
    deps: Any
    confirmation_id: str | None = None
    """The user confirmation that authorized this call, if its tool needs one."""
    is_cancelled: Callable[..., bool] = field(default=lambda **_: False)
    """Has the run been cancelled? Backed by the ledger; poll it at safe points
    (``is_cancelled(fresh=True)`` skips the short cache)."""

    clock: Callable[[], float] = field(default=time.time)
    """Now, in epoch seconds on the database's clock (the one ``deadline_at`` is on), as the
    worker reads it: this host's clock corrected by its measured offset."""

    interrupt: CancelSignal = field(default_factory=CancelSignal, repr=False, compare=False)
    """Set when the worker interrupts this call: its run is being cancelled, its deadline
    passed, or its lease could not be renewed. Blocking waits that honour it end at once:
    :meth:`sleep`, what :meth:`on_interrupt` registers, :mod:`warrant.tools.blocking`."""

    _usage: UsageMeter = field(default_factory=UsageMeter, repr=False, compare=False)

    def report_usage(self, *, tokens: int = 0, cost: float = 0.0) -> None:
        """Charge the run for what this call consumed (a paid search API, a model the tool
        asked): ``tokens`` and ``cost`` (in the price table's currency) are added to the run's
        ``max_tokens`` and ``max_cost`` budgets with the call's outcome, whatever the outcome
        (a refusal or a failure after a paid request is charged too). Reports add up."""
        self._usage.add(tokens, cost)

    @property
    def reported_usage(self) -> ToolUsage:
        """The usage reported so far in this call."""
        return self._usage.total

    def item_token(self, key: str) -> str:
        """The idempotency key of one item of a batch tool's call (see ``warrant.tools.Batch``)."""
        return item_token(self.idempotency_token, key)

    def remaining_s(self) -> float:
        """Seconds left before this attempt's deadline (it starts with the attempt)."""
        return max(0.0, self.deadline_at - self.clock())

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; raises :class:`~warrant.runner.errors.ToolInterrupted` as soon as
        the worker interrupts the call (a plain ``time.sleep`` on the threads pool runs on)."""
        if self.interrupt.wait(max(0.0, seconds)):
            raise ToolInterrupted("the worker interrupted the call")

    def on_interrupt(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` (from the worker's watch thread) when the call is interrupted, at
        once if it already is: close the connection a blocking read waits on. Returns the
        undo, to call once that wait is over."""
        return self.interrupt.on_set(callback)

    @property
    def fencing_token(self) -> tuple[str, int]:
        """``(command_id, attempt)``: attempts of a command only grow, and only the current
        one may record an outcome. A service that keeps the highest attempt it has seen per
        command can refuse a write from an older attempt (one whose lease was taken over)."""
        return (self.command_id, self.attempt)
