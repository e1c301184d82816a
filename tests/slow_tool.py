"""A test read that takes its time in one plain sleep, which nothing interrupts on a threads
pool: a parallel step's branch that outlives its step's merge (the merge cuts it, the sleep
runs on), its effect pending while the run plans on. Served only by its test's own
threads-pool worker (queue ``tool.slow_read``).

Registered with ``WARRANT_TOOLS=...,tests.slow_tool:plugin``."""

from __future__ import annotations

import time

from pydantic import Field

from warrant.tools import Plugin, SideEffect, Tool, ToolContext, ToolInput, ToolOutput

__all__ = ["CAPABILITY", "TOOL", "plugin", "proposal"]

CAPABILITY = "slow:read"


class SlowInput(ToolInput):
    delay_s: float = Field(ge=0, le=10)
    """How long the read takes."""


class SlowOutput(ToolOutput):
    slept_s: float
    """How long the read took."""


def _slow_read(args: SlowInput, ctx: ToolContext) -> SlowOutput:
    time.sleep(args.delay_s)  # a plain sleep: a cut reaches the call only once it is over
    return SlowOutput(slept_s=args.delay_s)


TOOL: Tool[SlowInput, SlowOutput] = Tool(
    name="slow_read",
    version="1",
    description="Read something slow (one plain sleep).",
    input_model=SlowInput,
    output_model=SlowOutput,
    capabilities=(CAPABILITY,),
    side_effect=SideEffect.READ,
    execute=_slow_read,
    timeout_s=30,
)

plugin = Plugin(name="slow", tools=(TOOL,))


def proposal(pid: str, delay_s: float) -> dict[str, object]:
    """A fixture planner's proposal of ``slow_read``."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "slow_read",
        "tool_version": "1",
        "arguments": {"delay_s": delay_s},
        "reason_summary": "",
        "source_observation_ids": [],
    }
