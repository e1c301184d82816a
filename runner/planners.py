"""Planners: something that, given the run's view, returns one raw (untrusted) output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from runner.spec import FixturePlannerSpec, RunSpec
from runner.state import RunView

__all__ = ["FixturePlanner", "Planner", "PlannerFailure", "planner_for"]


class PlannerFailure(Exception):
    """The planner produced nothing usable; ``code`` is stable."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


class Planner(Protocol):
    def propose(self, run: RunView) -> Any: ...


@dataclass(frozen=True)
class FixturePlanner:
    """Scripted outputs: the n-th model call returns ``outputs[n]``. Deterministic."""

    spec: FixturePlannerSpec

    def propose(self, run: RunView) -> Any:
        if run.model_calls >= len(self.spec.outputs):
            raise PlannerFailure("FIXTURE_PLANNER_EXHAUSTED")
        return self.spec.outputs[run.model_calls]


def planner_for(spec: RunSpec) -> Planner:
    if isinstance(spec.planner, FixturePlannerSpec):
        return FixturePlanner(spec.planner)
    raise PlannerFailure("PLANNER_KIND_UNSUPPORTED")  # pragma: no cover - spec forbids it
