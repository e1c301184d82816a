"""Planner kind ``router``: its classifier names a label, :mod:`warrant.runner.routing` decides.

The classifier (a fixture or an OpenAI-compatible planner) is asked once. Every other output of
a router run is the program's own, with no model call: the branch's ``delegate`` call after a
person picked the label, and the final answer once the branch's sub-run has ended.
"""

from __future__ import annotations

__layer__ = "adapters"

from dataclasses import dataclass

from warrant.runner import routing
from warrant.runner.memory_view import WorkingMemoryView
from warrant.runner.planner_protocol import Planner, PlannerReply
from warrant.runner.spec import RouterPlannerSpec, Usage
from warrant.runner.views import RunView

__all__ = ["RouterPlanner"]


@dataclass(frozen=True)
class RouterPlanner:
    spec: RouterPlannerSpec
    classifier: Planner

    def propose(self, run: RunView, view: WorkingMemoryView | None = None) -> PlannerReply:
        items = view.items if view is not None else []
        goal = view.goal.content if view is not None else ""
        ended = [i for i in items if i.item_id.startswith("job-")]
        if ended:
            return PlannerReply(routing.final_of(ended[-1].item_id, ended[-1].content), Usage(), 0)
        answers = [i for i in items if i.item_id.startswith("answer-") and i.source == "user"]
        if answers:
            decision = routing.by_person(self.spec, answers[-1].content)
            usage, calls = Usage(), 0
        else:
            reply = self.classifier.propose(run, self._asked(view))
            decision = routing.classify(self.spec, reply.raw)
            usage, calls = reply.usage, reply.calls
        output = routing.output_of(self.spec, decision, goal=goal, step=run.step + 1)
        return PlannerReply(output, usage, calls)

    def _asked(self, view: WorkingMemoryView | None) -> WorkingMemoryView | None:
        """The classifier's view: the request behind the instruction, and no tool to call."""
        if view is None:
            return None
        goal = view.goal.model_copy(
            update={"content": routing.instruction(self.spec) + view.goal.content}
        )
        return view.model_copy(update={"goal": goal, "tools": []})
