"""The planner's own plan and its wait: the shapes of the ``kind: plan`` and ``kind: wait``
planner outputs (members of :data:`warrant.runner.spec.PlannerOutput`) and what makes a plan a
graph. What a step does with them is :mod:`warrant.runner.step_decisions`'s
(``plan_revision``, ``check_wait``, ``wake_of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_MAX_WAIT_S",
    "MAX_OPEN_QUESTIONS",
    "MAX_PLAN_NODES",
    "MAX_WAIT_S",
    "Plan",
    "PlanNode",
    "Wait",
    "WaitEvent",
    "plan_graph_problem",
]

#: The longest a planner's ``wait`` may last by default (``Budgets.max_wait_s``) ...
DEFAULT_MAX_WAIT_S = 300.0
#: ... and at most (a day), whatever the spec says.
MAX_WAIT_S = 24 * 3600.0
#: Nodes one plan may hold, and open questions.
MAX_PLAN_NODES = 50
MAX_OPEN_QUESTIONS = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: A plan node's id: short, and plain enough to quote in a ``depends_on``.
PlanNodeId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")]


class PlanNode(_Strict):
    """One node of a plan: what to do, what it waits for, and how the planner will know it is
    done (the model's own words: never evidence, never a permission)."""

    id: PlanNodeId
    description: str = Field(min_length=1, max_length=500)
    depends_on: list[PlanNodeId] = Field(default_factory=list, max_length=MAX_PLAN_NODES)
    done_when: str = Field(default="", max_length=500)
    status: Literal["open", "done", "dropped"] = "open"


class Plan(_Strict):
    """The planner records (or revises) its plan: a graph of nodes with their dependencies
    (every one a known node, no cycle) and the questions still open. A step with no tool
    call: it costs the step and its model call, and the next step is planned at once. The plan
    is the model's text: shown back to it as its own notes, never a trusted source."""

    kind: Literal["plan"]
    nodes: list[PlanNode] = Field(min_length=1, max_length=MAX_PLAN_NODES)
    open_questions: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default_factory=list, max_length=MAX_OPEN_QUESTIONS
    )
    reason_summary: str = Field(default="", max_length=1_000)

    @model_validator(mode="after")
    def _a_graph(self) -> Plan:
        problem = plan_graph_problem(self.nodes)
        if problem is not None:
            raise ValueError(problem)
        return self


def plan_graph_problem(nodes: Sequence[PlanNode]) -> str | None:
    """Why ``nodes`` are no plan: a repeated id, a dependency on no node, a cycle (None: a
    graph the planner may follow)."""
    ids = [n.id for n in nodes]
    if len(set(ids)) != len(ids):
        return "duplicate node id"
    known = set(ids)
    for node in nodes:
        unknown = [d for d in node.depends_on if d not in known]
        if unknown:
            return f"node {node.id} depends on unknown node {unknown[0]}"
    after = {n.id: set(n.depends_on) for n in nodes}
    while after:  # peel the nodes whose dependencies are all peeled: what is left is a cycle
        ready = {i for i, deps in after.items() if not deps & after.keys()}
        if not ready:
            return f"dependency cycle through node {min(after)}"
        for i in ready:
            del after[i]
    return None


#: What an event ``wait`` may wait for.
WaitEvent = Literal["pending_effects_settled"]


class Wait(_Strict):
    """The planner asks to be asked again later: after ``seconds``, or once ``until`` happens
    (``pending_effects_settled``: the run has no pending effect) and ``max_seconds`` at most.
    The step commits the wait and no worker holds it; the deadline keeps running."""

    kind: Literal["wait"]
    seconds: float | None = Field(default=None, gt=0, le=MAX_WAIT_S)
    until: WaitEvent | None = None
    max_seconds: float | None = Field(default=None, gt=0, le=MAX_WAIT_S)
    reason: str = Field(default="", max_length=1_000)

    @model_validator(mode="after")
    def _one_way(self) -> Wait:
        if (self.seconds is None) == (self.until is None):
            raise ValueError("give either seconds or until")
        if self.until is not None and self.max_seconds is None:
            raise ValueError("an until wait needs max_seconds")
        if self.seconds is not None and self.max_seconds is not None:
            raise ValueError("max_seconds bounds an until wait only")
        return self

    @property
    def longest_s(self) -> float:
        """How long the wait may last at most."""
        return float(self.seconds if self.seconds is not None else self.max_seconds or 0.0)
