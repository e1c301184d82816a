"""pydantic-ai: warrant's tools as a toolset; warrant's confirmation as pydantic-ai's deferred
tool approval.

    client = Client.from_env()          # WARRANT_SERVER_URL + a producer's WARRANT_API_TOKEN
    toolset = WarrantToolset(client, run_id, by="support-agent", approver=page_the_on_call)
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])
    result = await agent.run("...")
    while isinstance(result.output, DeferredToolRequests):  # warrant waits for a person
        results = await toolset.results(result.output, wait_s=600)  # inbox, API or CLI
        result = await agent.run(message_history=result.all_messages(),
                                 deferred_tool_results=results)

Each call is a proposal of ``run_id`` (planner kind ``external``) under pydantic-ai's tool-call
id: the same id again is the same proposal (a lost answer never runs the call twice). The tools
offered are those the run's grants cover. A call the gate accepts runs on warrant's tool
workers and returns its output; a refusal, a failure or an unknown effect raises
:class:`pydantic_ai.ToolFailed` with the stable code first (the model reads it; an unknown
effect says ``UNKNOWN_EFFECT``, never success); warrant out of reach raises
:class:`pydantic_ai.ModelRetry` (retryable: the same call again is sent under the same key). A
call that needs a person raises :class:`pydantic_ai.ApprovalRequired` (metadata: ``run_id``,
``step``, ``proposal_hash``): the agent cannot approve it. A person decides in warrant (inbox,
API, CLI) with an approver's credential; ``approver`` (optional) is called with each such call
to ask one. :meth:`WarrantToolset.results` reads those decisions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import (
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolset,
    ModelRetry,
    RunContext,
    Tool,
    ToolDenied,
    ToolFailed,
)

from warrant.contrib._tools import (
    Approver,
    error_text,
    failure_text,
    gate_calls,
    offered,
    succeeded,
)
from warrant.runner.client.contract import RunnerClient
from warrant.runner.errors import ServiceUnavailable, WarrantError
from warrant.tools._registry import Registry

__all__ = ["WarrantToolset"]

#: Prefixes pydantic-ai's tool-call ids in warrant's keys.
KEY_PREFIX = "pydantic-ai:"


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
        approver: Approver | None = None,
    ) -> None:
        self.run_id = run_id
        self.by = by
        self.approver = approver
        self._asked: set[tuple[int, int]] = set()
        self.calls, registry = gate_calls(client, registry, decision_wait_s=decision_wait_s)
        offer = offered(registry, tools, client=client, run_id=run_id)
        super().__init__([self._tool(t) for t in offer])

    def _tool(self, contract: Any) -> Tool[Any]:
        name = contract.name

        async def call(ctx: RunContext[Any], **arguments: Any) -> Any:
            key = KEY_PREFIX + ctx.tool_call_id if ctx.tool_call_id else None
            try:
                d = await asyncio.to_thread(
                    self.calls.call, self.run_id, name, arguments, by=self.by, call_id=key
                )
            except ServiceUnavailable as exc:  # no decision: retryable, under the same key
                raise ModelRetry(error_text(exc)) from None
            except WarrantError as exc:  # the run takes no proposal now: say why
                raise ToolFailed(error_text(exc)) from None
            if d.state == "awaiting_confirmation" and not ctx.tool_call_approved:
                if self.approver is not None and (d.step, d.branch) not in self._asked:
                    self._asked.add((d.step, d.branch))
                    await asyncio.to_thread(self.approver, d)
                raise ApprovalRequired(
                    metadata={
                        "run_id": d.run_id,
                        "step": d.step,
                        "branch": d.branch,
                        "proposal_hash": d.proposal_hash,
                    }
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
        self, requests: DeferredToolRequests, *, wait_s: float = 0.0
    ) -> DeferredToolResults:
        """The deferred results to resume the agent with: each call's decision as a person
        made it in warrant (inbox, API, CLI), waiting up to ``wait_s`` for it. A call still
        undecided is left out (pydantic-ai asks for it again)."""
        out: dict[str, Any] = {}
        for call in requests.approvals:
            meta = requests.metadata.get(call.tool_call_id) or {}
            d = await asyncio.to_thread(
                self.calls.client.decision,
                meta["run_id"],
                meta["step"],
                branch=meta.get("branch", 0),
            )
            d = await asyncio.to_thread(self.calls.settle, d, approval_wait_s=wait_s)
            if d.state in ("refused", "stopped"):
                out[call.tool_call_id] = ToolDenied(failure_text(d))
            elif d.state != "awaiting_confirmation":
                out[call.tool_call_id] = True  # runs the tool again: it picks the outcome up
        return DeferredToolResults(approvals=out)
