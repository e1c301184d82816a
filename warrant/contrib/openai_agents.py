"""The OpenAI Agents SDK: warrant's tools as function tools; warrant's confirmation as the
SDK's tool approval (``needs_approval``, ``result.interruptions``).

    client = Client.from_env()          # WARRANT_SERVER_URL + a producer's WARRANT_API_TOKEN
    gate = WarrantTools(client, run_id, by="support-agent", approver=page_the_on_call)
    agent = Agent(name="support", model=model, tools=gate.tools)
    result = await Runner.run(agent, "...")
    while result.interruptions:                          # warrant waits for a person
        state = result.to_state()
        for item in result.interruptions:
            await gate.decided(state, item, wait_s=600)  # decided in the inbox, API or CLI
        result = await Runner.run(agent, state)

Each call is a proposal of ``run_id`` (planner kind ``external``) under the SDK's tool-call id,
made when the SDK asks whether the call needs approval: the gate decides then, and the same
tool-call id again is the same proposal (a lost answer never runs the call twice). The tools
offered are those the run's grants cover. An accepted call runs on warrant's tool workers; the
model reads its output as JSON. A refusal, a failure or an unknown effect is the tool's error
text, led by the stable code (``UNKNOWN_EFFECT`` for an unknown effect, never success); warrant
out of reach is said to be retryable. A call that needs a person is an interruption: the agent
cannot approve it. A person decides in warrant (inbox, API, CLI) with an approver's credential;
``approver`` (optional) is called with each such call to ask one. :meth:`WarrantTools.decided`
carries that decision into the SDK's run state.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from warrant.contrib._tools import (
    Approver,
    error_text,
    failure_text,
    gate_calls,
    offered,
    output_text,
    succeeded,
)
from warrant.runner.client.contract import RunnerClient
from warrant.runner.errors import WarrantError
from warrant.runner.external import Decision
from warrant.tools._registry import Registry

__all__ = ["WarrantTools"]

#: Prefixes the SDK's tool-call ids in warrant's keys.
KEY_PREFIX = "openai-agents:"


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
        approver: Approver | None = None,
    ) -> None:
        self.run_id = run_id
        self.by = by
        self.approver = approver
        self.calls, registry = gate_calls(client, registry, decision_wait_s=decision_wait_s)
        self._decided: dict[str, Decision] = {}
        self._refused: dict[str, str] = {}
        offer = offered(registry, tools, client=client, run_id=run_id)
        self.tools: list[FunctionTool] = [self._tool(t) for t in offer]

    def _tool(self, contract: Any) -> FunctionTool:
        name = contract.name

        async def needs_approval(
            ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            try:
                d = await self._call(name, params, call_id)
            except WarrantError as exc:  # no decision: the tool says why
                self._refused[call_id] = error_text(exc)
                return False
            self._decided[call_id] = d
            if d.state == "awaiting_confirmation" and self.approver is not None:
                await asyncio.to_thread(self.approver, d)
            return d.state == "awaiting_confirmation"

        async def on_invoke_tool(ctx: ToolContext[Any], args_json: str) -> str:
            if ctx.tool_call_id in self._refused:
                return self._refused.pop(ctx.tool_call_id)
            d = self._decided.pop(ctx.tool_call_id, None)
            if d is None or not d.settled:  # approved meanwhile: its outcome, once
                try:
                    d = await self._call(name, json.loads(args_json or "{}"), ctx.tool_call_id)
                except WarrantError as exc:
                    return error_text(exc)
            return output_text(d) if succeeded(d) else failure_text(d)

        return FunctionTool(
            name=name,
            description=contract.description,
            params_json_schema=contract.describe()["inputSchema"],
            on_invoke_tool=on_invoke_tool,
            strict_json_schema=False,
            needs_approval=needs_approval,
        )

    async def _call(self, name: str, arguments: dict[str, Any], call_id: str) -> Decision:
        return await asyncio.to_thread(
            self.calls.call,
            self.run_id,
            name,
            arguments,
            by=self.by,
            call_id=KEY_PREFIX + call_id if call_id else None,
        )

    async def decided(self, state: Any, item: Any, *, wait_s: float = 0.0) -> bool:
        """Carry the decision a person made in warrant on the interrupted call into the SDK's
        ``state`` (approved: ``state.approve``; declined or refused: ``state.reject`` with
        the reason), waiting up to ``wait_s`` for it. False while nobody decided (the state
        is left as it is: ask again)."""
        raw = item.raw_item
        call_id = str(getattr(raw, "call_id", None) or getattr(raw, "id", None) or "")
        d = self._decided.get(call_id)
        if d is None:
            raise KeyError(f"no warrant proposal for tool call {call_id!r}")
        d = await asyncio.to_thread(self.calls.settle, d, approval_wait_s=wait_s)
        self._decided[call_id] = d
        if d.state == "awaiting_confirmation":
            return False
        if d.state in ("refused", "stopped"):
            state.reject(item, rejection_message=failure_text(d))
        else:
            state.approve(item)  # runs the tool again: it picks the outcome up
        return True
