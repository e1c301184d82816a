"""A test tool that pays for what it does, as a paid search API or a tool that asks a model
would: it reports ``tokens`` and ``cost`` with :meth:`ToolContext.report_usage`, then succeeds
or refuses. The run's token and cost budgets must count it.

Registered with ``WARRANT_TOOLS=...,tests.paid_tool:plugin``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from warrant.tools import Plugin, SideEffect, Tool, ToolContext, ToolInput, ToolOutput, ToolRejected

__all__ = ["CAPABILITY", "REF", "TOOL", "plugin", "proposal"]

#: The ``WARRANT_TOOLS`` reference of this plug-in.
REF = "tests.paid_tool:plugin"
CAPABILITY = "search:paid"


class PaidInput(ToolInput):
    query: str = Field(min_length=1, max_length=200)
    """What to look up."""
    tokens: int = Field(default=0, ge=0, le=1_000_000)
    """Tokens the call reports it used."""
    cost: float = Field(default=0.0, ge=0, le=1_000)
    """What the call reports it cost."""
    outcome: Literal["succeed", "reject"] = "succeed"
    """What the call does once it has paid."""


class PaidOutput(ToolOutput):
    answer: str
    """The answer found."""


def _paid_search(args: PaidInput, ctx: ToolContext) -> PaidOutput:
    ctx.report_usage(tokens=args.tokens, cost=args.cost / 2)
    ctx.report_usage(cost=args.cost / 2)  # reports add up
    if args.outcome == "reject":
        raise ToolRejected("the paid index has nothing for that query", code="NOTHING_FOUND")
    return PaidOutput(answer=f"found {args.query}")


TOOL: Tool[PaidInput, PaidOutput] = Tool(
    name="paid_search",
    version="1",
    description="Search a paid index (each call is billed to the run).",
    input_model=PaidInput,
    output_model=PaidOutput,
    capabilities=(CAPABILITY,),
    side_effect=SideEffect.READ,
    execute=_paid_search,
    resource=lambda args, subject: "paid",
)

plugin = Plugin(name="paid", tools=(TOOL,))


def proposal(pid: str, **arguments: object) -> dict[str, object]:
    """A fixture planner's proposal of ``paid_search``."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "paid_search",
        "tool_version": "1",
        "arguments": {"query": f"question {pid}", **arguments},
        "reason_summary": "",
        "source_observation_ids": [],
    }
