"""A test write that stops slowly when its run is cancelled: it waits for the cancel by polling
``ctx.is_cancelled()``, then spends ``tidy_s`` closing its session while it reports that nothing
was written — as a tool that rolls back a transaction would. The cancel's signal can land in that
tidy-up; it must not turn the known "nothing was written" into an unknown effect.

Each step appends one line to the file ``journal`` names, so a test can wait on facts.

Registered with ``WARRANT_TOOLS=...,tests.stopping_tool:plugin``."""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import Field

from warrant.tools import Plugin, SideEffect, Tool, ToolContext, ToolFailed, ToolInput, ToolOutput

__all__ = ["CAPABILITY", "TOOL", "journal_lines", "plugin", "proposal"]

CAPABILITY = "stopping:write"


class StopInput(ToolInput):
    journal: str = Field(min_length=1, max_length=500)
    """A file each step of the call appends a line to."""
    tidy_s: float = Field(default=1.5, ge=0, le=10)
    """How long the call takes to close its session once it saw the cancel."""


class StopOutput(ToolOutput):
    written: bool
    """Whether the write happened."""


def _write_when_allowed(args: StopInput, ctx: ToolContext) -> StopOutput:
    journal = Path(args.journal)
    _append(journal, "started")
    end = time.monotonic() + 30
    while time.monotonic() < end and not ctx.is_cancelled():
        time.sleep(0.05)
    try:
        raise ToolFailed("cancelled before the write", code="CANCELLED_BEFORE_WRITE")
    finally:
        _append(journal, "tidying")
        time.sleep(args.tidy_s)  # closing its session: the cancel's signal may land here


def _append(journal: Path, line: str) -> None:
    with journal.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


def journal_lines(journal: Path) -> list[str]:
    return journal.read_text(encoding="utf-8").split() if journal.exists() else []


TOOL: Tool[StopInput, StopOutput] = Tool(
    name="stop_slowly",
    version="1",
    description="A write that waits for its run's cancel and then stops slowly.",
    input_model=StopInput,
    output_model=StopOutput,
    capabilities=(CAPABILITY,),
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    execute=_write_when_allowed,
    resource=lambda args, subject: "journal",
    timeout_s=30,
    unverified=True,
    unverified_reason="a test tool that never writes: it stops at its run's cancel",
)

plugin = Plugin(name="stopping", tools=(TOOL,))


def proposal(pid: str, journal: Path, **arguments: object) -> dict[str, object]:
    """A fixture planner's proposal of ``stop_slowly``."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "stop_slowly",
        "tool_version": "1",
        "arguments": {"journal": str(journal), **arguments},
        "reason_summary": "",
        "source_observation_ids": [],
    }
