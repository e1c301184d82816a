"""Planners: given the run's view, return one raw (untrusted) output and its usage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from warrant.runner.errors import SpecError, WarrantError
from warrant.runner.memory import WorkingMemoryView
from warrant.runner.spec import FixturePlannerSpec, PluginPlannerSpec, RunSpec, Usage
from warrant.runner.state import RunView

if TYPE_CHECKING:
    from warrant.runner.planner_kinds import PlannerKind

__all__ = ["FixturePlanner", "Planner", "PlannerFailure", "PlannerReply", "planner_for"]


class PlannerFailure(WarrantError):
    """The planner produced nothing usable; ``code`` is stable (e.g. ``MODEL_UNREACHABLE``).

    ``usage`` and ``calls`` are what the failed attempt cost (charged to the run's budgets)."""

    code = "PLANNER_FAILED"

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


@dataclass(frozen=True)
class FixturePlanner:
    """Scripted outputs: the n-th model call returns ``outputs[n]``. Deterministic."""

    spec: FixturePlannerSpec

    def propose(self, run: RunView, view: WorkingMemoryView | None = None) -> PlannerReply:
        usage = self.spec.usage_per_call or Usage()
        if run.model_calls >= len(self.spec.outputs):
            raise PlannerFailure("FIXTURE_PLANNER_EXHAUSTED", usage=usage)
        return PlannerReply(self.spec.outputs[run.model_calls], usage)


def planner_for(
    spec: RunSpec,
    *,
    prices: dict[str, dict[str, float]] | None = None,
    allow_remote: bool = False,
    kinds: Mapping[str, PlannerKind] | None = None,
) -> Planner:
    """The planner a spec names; a plug-in kind must be among ``kinds`` (else
    ``PLANNER_KIND_UNKNOWN``, a planner failure: this worker cannot serve the run)."""
    if isinstance(spec.planner, FixturePlannerSpec):
        return FixturePlanner(spec.planner)
    if isinstance(spec.planner, PluginPlannerSpec):
        from warrant.runner.planner_kinds import resolve

        try:
            kind, settings = resolve(spec.planner, kinds or {})
        except SpecError as exc:
            raise PlannerFailure("PLANNER_KIND_UNKNOWN", str(exc), calls=0) from None
        return kind.build(settings)
    from warrant.runner.llm import OpenAIPlanner

    return OpenAIPlanner(spec.planner, prices or {}, allow_remote=allow_remote)
