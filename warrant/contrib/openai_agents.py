"""The OpenAI Agents SDK: warrant's tools as function tools; warrant's confirmation as the
SDK's tool approval (``needs_approval``, ``result.interruptions``).

    gate = WarrantTools(client, run_id, by="support-agent", tools=["lookup", "send_notice"])
    agent = Agent(name="support", model=model, tools=gate.tools)
    result = await Runner.run(agent, "...")
    while result.interruptions:                          # warrant waits for a person
        state = result.to_state()
        for item in result.interruptions:
            await gate.approve(state, item, by="alice")  # or gate.reject(...)
        result = await Runner.run(agent, state)

Each call is a proposal of ``run_id`` (planner kind ``external``), made when the SDK asks
whether the call needs approval: the gate decides then. An accepted call runs on warrant's
tool workers; the model reads its output as JSON. A refusal, a failure or an unknown effect is
the tool's error text, led by the stable code (``UNKNOWN_EFFECT`` for an unknown effect, never
success). A call that needs a person is an interruption; :meth:`WarrantTools.approve` and
:meth:`WarrantTools.reject` record the person's decision in warrant, bound to the exact
proposal hash, and in the SDK's run state.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from warrant.contrib._tools import failure_text, gate_calls, offered, output_text, succeeded
from warrant.runner.client.contract import RunnerClient
from warrant.runner.errors import WarrantError
from warrant.runner.external import Decision
from warrant.tools._registry import Registry

__all__ = ["WarrantTools"]


class WarrantTools:
    def __init__(
        self,
        client: RunnerClient,
        run_id: str,
        *,
        by: str,
        tools: list[str] | None = None,
        registry: Registry | None = None,
        decision_wait_s: float = 120.0,
    ) -> None:
        self.run_id = run_id
        self.by = by
        self.calls, registry = gate_calls(client, registry, decision_wait_s=decision_wait_s)
        self._decided: dict[str, Decision] = {}
        self._refused: dict[str, str] = {}
        self.tools: list[FunctionTool] = [self._tool(t) for t in offered(registry, tools)]

    def _tool(self, contract: Any) -> FunctionTool:
        name = contract.name

        async def needs_approval(
            ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            try:
                d = await asyncio.to_thread(self.calls.call, self.run_id, name, params, by=self.by)
            except WarrantError as exc:  # the run takes no proposal now: the tool says why
                self._refused[call_id] = f"{exc.code}: {exc}"
                return False
            self._decided[call_id] = d
            return d.state == "awaiting_confirmation"

        async def on_invoke_tool(ctx: ToolContext[Any], args_json: str) -> str:
            if ctx.tool_call_id in self._refused:
                return self._refused.pop(ctx.tool_call_id)
            d = self._decided.pop(ctx.tool_call_id, None)
            if d is None or not d.settled:  # approved meanwhile: its outcome, once
                arguments = json.loads(args_json or "{}")
                d = await asyncio.to_thread(
                    self.calls.call, self.run_id, name, arguments, by=self.by
                )
            return output_text(d) if succeeded(d) else failure_text(d)

        return FunctionTool(
            name=name,
            description=contract.description,
            params_json_schema=contract.describe()["inputSchema"],
            on_invoke_tool=on_invoke_tool,
            strict_json_schema=False,
            needs_approval=needs_approval,
        )

    async def approve(self, state: Any, item: Any, *, by: str) -> None:
        """A person approves the interrupted call: confirmed in warrant (its exact hash) and
        in the SDK's ``state``; resuming the run executes it."""
        await self._decide(item, approved=True, by=by)
        state.approve(item)

    async def reject(self, state: Any, item: Any, *, by: str, message: str | None = None) -> None:
        """A person refuses the interrupted call: declined in warrant and in ``state``."""
        d = await self._decide(item, approved=False, by=by)
        state.reject(item, rejection_message=message or failure_text(d))

    async def _decide(self, item: Any, *, approved: bool, by: str) -> Decision:
        raw = item.raw_item
        call_id = str(getattr(raw, "call_id", None) or getattr(raw, "id", None) or "")
        d = self._decided.get(call_id)
        if d is None:
            raise KeyError(f"no warrant proposal for tool call {call_id!r}")
        d = await asyncio.to_thread(self.calls.decide, d, approved=approved, by=by)
        self._decided[call_id] = d
        return d
