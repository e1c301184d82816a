"""Planners: given the run's view, return one raw (untrusted) output and its usage.

:func:`planner_for` picks the planner a run spec names: the scripted fixture planner (here), the
OpenAI-compatible one (:mod:`warrant.runner.planners.openai_compatible`) or a plug-in kind. What
a planner is and returns (:class:`Planner`, :class:`PlannerReply`, :class:`PlannerFailure`) is
defined in :mod:`warrant.runner.planner_protocol` and re-exported here, with
:class:`PlannerRetryLater` (:mod:`warrant.runner.retry`): a plug-in planner whose model is busy
raises it, and the stage asks again later without holding a worker.
"""

from __future__ import annotations

__layer__ = "adapters"

from collections.abc import Mapping
from dataclasses import dataclass

from warrant.runner.errors import SpecError
from warrant.runner.limits import ModelLimiter
from warrant.runner.memory_view import WorkingMemoryView
from warrant.runner.planner_protocol import Planner, PlannerFailure, PlannerReply
from warrant.runner.planners.kinds import PlannerKind, resolve
from warrant.runner.planners.openai_compatible import OpenAIPlanner
from warrant.runner.planners.router import RouterPlanner
from warrant.runner.retry import PlannerRetryLater
from warrant.runner.spec import (
    ExternalPlannerSpec,
    FixturePlannerSpec,
    PluginPlannerSpec,
    RouterPlannerSpec,
    RunSpec,
    Usage,
)
from warrant.runner.views import RunView

__all__ = [
    "FixturePlanner",
    "Planner",
    "PlannerFailure",
    "PlannerReply",
    "PlannerRetryLater",
    "planner_for",
]


@dataclass(frozen=True)
class FixturePlanner:
    """Scripted outputs: the run's n-th own model call returns ``outputs[n]`` (its sub-runs'
    calls, which its model-call counter also holds, do not move the script). Deterministic."""

    spec: FixturePlannerSpec

    def propose(self, run: RunView, view: WorkingMemoryView | None = None) -> PlannerReply:
        usage = self.spec.usage_per_call or Usage()
        own = run.model_calls - run.model_calls_delegated
        if own >= len(self.spec.outputs):
            raise PlannerFailure("FIXTURE_PLANNER_EXHAUSTED", usage=usage)
        return PlannerReply(self.spec.outputs[own], usage)


def planner_for(
    spec: RunSpec,
    *,
    prices: dict[str, dict[str, float]] | None = None,
    allow_remote: bool = False,
    kinds: Mapping[str, PlannerKind] | None = None,
    limiter: ModelLimiter | None = None,
) -> Planner:
    """The planner a spec names; a plug-in kind must be among ``kinds`` (else
    ``PLANNER_KIND_UNKNOWN``, a planner failure: this worker cannot serve the run)."""
    if isinstance(spec.planner, FixturePlannerSpec):
        return FixturePlanner(spec.planner)
    if isinstance(spec.planner, RouterPlannerSpec):
        inner = spec.model_copy(update={"planner": spec.planner.classifier})
        classifier = planner_for(inner, prices=prices, allow_remote=allow_remote, limiter=limiter)
        return RouterPlanner(spec.planner, classifier)
    if isinstance(spec.planner, ExternalPlannerSpec):
        raise PlannerFailure("PLANNER_EXTERNAL", "the caller proposes for this run", calls=0)
    if isinstance(spec.planner, PluginPlannerSpec):
        try:
            kind, settings = resolve(spec.planner, kinds or {})
        except SpecError as exc:
            raise PlannerFailure("PLANNER_KIND_UNKNOWN", str(exc), calls=0) from None
        return kind.build(settings)
    return OpenAIPlanner(
        spec.planner,
        prices or {},
        allow_remote=allow_remote,
        limiter=limiter,
        max_parallel_calls=spec.policy.max_parallel_calls,
    )
