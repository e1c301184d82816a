"""Tool sources, deps factories and planner kinds for the plug-in tests (named by reference
in ``WARRANT_TOOLS`` / ``WARRANT_PLANNERS``, as a deployment would)."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from warrant.runner.planners import PlannerReply
from warrant.runner.spec import Usage
from warrant.tools._contract import SideEffect, Tool, ToolContext, ToolInput, ToolOutput
from warrant.tools._plugins import DepsContext, Plugin
from warrant.tools._registry import Registry


class EchoInput(ToolInput):
    text: str = Field(min_length=1, max_length=200)
    """What to echo."""


class EchoOutput(ToolOutput):
    text: str
    """The text, echoed."""
    deps: str
    """Which deps object served the call."""


def _echo(args: EchoInput, ctx: ToolContext) -> EchoOutput:
    return EchoOutput(text=args.text, deps=str(getattr(ctx.deps, "label", type(ctx.deps).__name__)))


def echo_tool(version: str) -> Tool[EchoInput, EchoOutput]:
    return Tool(
        name="echo",
        version=version,
        description=f"Echo a text (version {version}).",
        input_model=EchoInput,
        output_model=EchoOutput,
        capabilities=("echo:read",),
        side_effect=SideEffect.READ,
        execute=_echo,
        resource=lambda args, subject: "echo",
    )


class EchoDeps:
    """A deps object that counts its closes in a file (the worker's shutdown closes it)."""

    label = "echo-deps"

    def __init__(self, ctx: DepsContext) -> None:
        self.closed_file = os.environ.get("WARRANT_TEST_DEPS_CLOSED_FILE")

    def close(self) -> None:
        if self.closed_file:
            with open(self.closed_file, "a") as f:
                f.write("closed\n")


ECHO_V1 = echo_tool("1")
ECHO_V2 = echo_tool("2")

#: What a tool worker built before echo 2 was deployed has.
echo_v1 = Plugin(name="echo", tools=(ECHO_V1,), deps=EchoDeps)
#: What the policy worker (and the session's pipeline worker) have.
echo_v2 = Plugin(name="echo", tools=(ECHO_V1, ECHO_V2), deps=EchoDeps)
#: An upgraded tool host that dropped echo 1 (a rolling upgrade's new side).
echo_v2_only = Plugin(name="echo", tools=(ECHO_V2,), deps=EchoDeps)

# the other shapes an entry point or WARRANT_TOOLS reference may name
single_tool = echo_tool("7")
tool_list = [echo_tool("8"), echo_tool("9")]
registry = Registry([echo_tool("10")])
clash = echo_tool("1")  # the same name and version as echo_v1's
not_a_tool = 42


class Deployment:
    """A deployment-wide deps object (``WARRANT_TOOL_DEPS``)."""

    label = "deployment-deps"


def deployment_deps(ctx: DepsContext) -> Deployment:
    return Deployment()


# --- a planner kind -------------------------------------------------------------------------


class ScriptSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    texts: list[str] = Field(min_length=1)
    """Echo these, one per step, then answer citing every tool result."""


class ScriptPlanner:
    def __init__(self, settings: ScriptSettings) -> None:
        self.settings = settings

    def propose(self, run: Any, view: Any = None) -> PlannerReply:
        n = run.model_calls
        if n < len(self.settings.texts):
            raw: dict[str, Any] = {
                "kind": "tool",
                "proposal_id": f"s{n + 1}",
                "tool": "echo",
                "tool_version": "1",
                "arguments": {"text": self.settings.texts[n]},
                "reason_summary": "scripted",
                "source_observation_ids": ["user-1"],
            }
        else:
            cites = [f"tool-{i + 1}" for i in range(len(self.settings.texts))]
            raw = {"kind": "final", "answer": "echoed", "citations": cites}
        return PlannerReply(raw, Usage())


def _kind() -> Any:
    from warrant.runner.planners.kinds import PlannerKind

    return PlannerKind(name="script", settings_model=ScriptSettings, build=ScriptPlanner)


script_planner = _kind()
