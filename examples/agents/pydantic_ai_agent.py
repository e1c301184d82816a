"""A pydantic-ai agent keeps its loop; warrant's gate decides each of its tool calls.

Needs: `warrant serve` with the demo plug-in's tools (`WARRANT_TOOLS=warrant_demo:plugin` on
the server and its workers: `lookup`, `send_notice`), and in this process
`WARRANT_SERVER_URL` plus a producer token in `WARRANT_API_TOKEN` (`warrant token create
agent --role producer`): the agent's process never holds the ledger's credentials and cannot
approve its own calls. A person approves in the inbox, `warrant run decide` or the API.
"""

import asyncio
import os

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from warrant import Client
from warrant.contrib.pydantic_ai import WarrantToolset

client = Client.from_env()  # WARRANT_SERVER_URL + WARRANT_API_TOKEN: over HTTP, as a producer
run_id = client.start_run(
    {
        "goal": "Tell the customer of order 42 that their refund is on its way.",
        "subject": "customer-42",
        "planner": {"kind": "external", "agent": "pydantic-ai"},
        "grants": [{"capability": "lookup:read"}, {"capability": "notices:send"}],
    }
)
# Fails here, loudly, if the deployment lacks a tool or the run does not grant it.
toolset = WarrantToolset(client, run_id, by="support-agent", tools=["lookup", "send_notice"])
model = OpenAIChatModel(
    os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"),
    provider=OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"]),  # key: OPENAI_API_KEY
)
agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])


async def main() -> None:
    result = await agent.run("Look order 42 up, then tell jo@example.com about the refund.")
    while isinstance(result.output, DeferredToolRequests):  # warrant waits for a person
        for call in result.output.approvals:
            print("a person must confirm:", call.tool_name, call.args_as_dict(), flush=True)
        # Decided by a person in warrant (inbox, CLI, API), bound to the exact hash.
        results = await toolset.results(result.output, wait_s=600)
        if not results.approvals:
            raise SystemExit(f"nobody decided within 10 minutes (run {run_id})")
        result = await agent.run(
            message_history=result.all_messages(), deferred_tool_results=results
        )
    print("agent:", result.output)
    final = {"kind": "final", "answer": result.output, "citations": ["tool-1"]}
    done = client.propose(run_id, final, by="support-agent", wait_s=30)
    if done.state != "completed":
        raise SystemExit(f"warrant did not accept the answer: {done.code} {done.message}")
    print("run", run_id, done.run_status)


asyncio.run(main())
