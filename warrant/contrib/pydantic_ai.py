"""pydantic-ai: warrant's tools as a toolset; warrant's confirmation as pydantic-ai's deferred
tool approval.

    toolset = WarrantToolset(client, run_id, by="support-agent", tools=["lookup", "send_notice"])
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])
    result = await agent.run("...")
    if isinstance(result.output, DeferredToolRequests):     # warrant waits for a person
        approvals = {call.tool_call_id: True for call in result.output.approvals}  # a person's
        results = await toolset.results(result.output, approvals, by="alice")
        result = await agent.run(message_history=result.all_messages(),
                                 deferred_tool_results=results)

Each call is a proposal of ``run_id`` (planner kind ``external``). A call the gate accepts runs
on warrant's tool workers and returns its output; a refusal, a failure or an unknown effect
raises :class:`pydantic_ai.ToolFailed` with the stable code first (the model reads it; an
unknown effect says ``UNKNOWN_EFFECT``, never success). A call that needs a person raises
:class:`pydantic_ai.ApprovalRequired` (metadata: ``run_id``, ``step``, ``proposal_hash``);
:meth:`WarrantToolset.results` records the person's decision in warrant, bound to that hash
(``approvals=None``: wait for a decision made in warrant's inbox, API or CLI instead).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import (
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolset,
    RunContext,
    Tool,
    ToolDenied,
    ToolFailed,
)

from warrant.contrib._tools import failure_text, gate_calls, offered, succeeded
from warrant.runner.client.contract import RunnerClient
from warrant.runner.errors import WarrantError
from warrant.tools._registry import Registry

__all__ = ["WarrantToolset"]


class WarrantToolset(FunctionToolset[Any]):
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
        super().__init__([self._tool(t) for t in offered(registry, tools)])

    def _tool(self, contract: Any) -> Tool[Any]:
        name = contract.name

        async def call(ctx: RunContext[Any], **arguments: Any) -> Any:
            try:
                d = await asyncio.to_thread(
                    self.calls.call, self.run_id, name, arguments, by=self.by
                )
            except WarrantError as exc:  # the run takes no proposal now: say why
                raise ToolFailed(f"{exc.code}: {exc}") from None
            if d.state == "awaiting_confirmation" and not ctx.tool_call_approved:
                raise ApprovalRequired(
                    metadata={"run_id": d.run_id, "step": d.step, "proposal_hash": d.proposal_hash}
                )
            if not succeeded(d):
                raise ToolFailed(failure_text(d))
            return d.output

        return Tool.from_schema(
            call,
            name=name,
            description=contract.description,
            json_schema=contract.describe()["inputSchema"],
            takes_ctx=True,
        )

    async def results(
        self,
        requests: DeferredToolRequests,
        approvals: dict[str, bool] | None = None,
        *,
        by: str = "",
        wait_s: float = 0.0,
    ) -> DeferredToolResults:
        """The deferred results to resume the agent with. ``approvals`` (by tool call id) are
        a person's decisions, recorded in warrant now (confirm or decline, bound to the exact
        proposal hash, as ``by``); without them, each call's decision is read from warrant
        (waiting up to ``wait_s`` for one made in the inbox, API or CLI)."""
        out: dict[str, Any] = {}
        for call in requests.approvals:
            meta = requests.metadata.get(call.tool_call_id) or {}
            d = await asyncio.to_thread(self.calls.client.decision, meta["run_id"], meta["step"])
            if approvals is not None:
                approved = bool(approvals.get(call.tool_call_id, False))
                d = await asyncio.to_thread(self.calls.decide, d, approved=approved, by=by)
            else:
                d = await asyncio.to_thread(self.calls.settle, d, approval_wait_s=wait_s)
            if d.state == "refused":
                out[call.tool_call_id] = ToolDenied(failure_text(d))
            elif d.state != "awaiting_confirmation":
                out[call.tool_call_id] = True  # runs the tool again: it picks the outcome up
        return DeferredToolResults(approvals=out)
