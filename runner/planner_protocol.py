"""What every planner is (:class:`Planner`) and returns (:class:`PlannerReply`, or raises
:class:`PlannerFailure`). The built-in planners (:mod:`warrant.runner.planners`,
:mod:`warrant.runner.planners.openai_compatible`) and plug-in kinds build on these; the factory
:func:`warrant.runner.planners.planner_for` picks one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from warrant.runner.codes import ErrorCode
from warrant.runner.errors import WarrantError
from warrant.runner.memory_view import WorkingMemoryView
from warrant.runner.spec import Usage
from warrant.runner.views import RunView

__all__ = ["Planner", "PlannerFailure", "PlannerReply"]


class PlannerFailure(WarrantError):
    """The planner produced nothing usable; ``code`` is stable (e.g. ``MODEL_UNREACHABLE``).

    ``usage`` and ``calls`` are what the failed attempt cost (charged to the run's budgets)."""

    code: str = ErrorCode.PLANNER_FAILED

    def __init__(
        self, code: str, message: str = "", *, usage: Usage | None = None, calls: int = 1
    ) -> None:
        super().__init__(message or code, code=code or None)
        self.usage = usage or Usage()
        self.calls = calls


@dataclass(frozen=True)
class PlannerReply:
    raw: Any
    """The untrusted output, parsed by the gate."""
    usage: Usage
    """Charged to the run's token and cost budgets."""
    calls: int = 1
    """Model calls this reply took (retries count)."""
    invalid: str | None = None
    """Why the reply could not be parsed into one output (then ``raw`` is None)."""


class Planner(Protocol):
    def propose(self, run: RunView, view: WorkingMemoryView | None = None) -> PlannerReply:
        """One untrusted output for the next step, given the working-memory ``view``."""
        ...
