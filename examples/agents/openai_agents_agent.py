"""An OpenAI Agents SDK agent keeps its loop; warrant's gate decides each of its tool calls.

Needs: `warrant serve` with the demo plug-in's tools (`WARRANT_TOOLS=warrant_demo:plugin` on
the server and its workers: `lookup`, `send_notice`), and in this process
`WARRANT_SERVER_URL` plus a producer token in `WARRANT_API_TOKEN` (`warrant token create
agent --role producer`): the agent's process never holds the ledger's credentials and cannot
approve its own calls. A person approves in the inbox, `warrant run decide` or the API.
"""

import asyncio
import os

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from warrant import Client
from warrant.contrib.openai_agents import WarrantTools

set_tracing_disabled(True)  # this example exports no traces to OpenAI
client = Client.from_env()  # WARRANT_SERVER_URL + WARRANT_API_TOKEN: over HTTP, as a producer
run_id = client.start_run(
    {
        "goal": "Tell the customer of order 42 that their refund is on its way.",
        "subject": "customer-42",
        "planner": {"kind": "external", "agent": "openai-agents"},
        "grants": [{"capability": "lookup:read"}, {"capability": "notices:send"}],
    }
)
# Fails here, loudly, if the deployment lacks a tool or the run does not grant it.
gate = WarrantTools(client, run_id, by="support-agent", tools=["lookup", "send_notice"])
model = OpenAIChatCompletionsModel(
    model=os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"),
    openai_client=AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"]),  # key: OPENAI_API_KEY
)
agent = Agent(name="support", instructions="Use the tools.", model=model, tools=gate.tools)


async def main() -> None:
    result = await Runner.run(agent, "Look order 42 up, then tell jo@example.com.")
    while result.interruptions:  # warrant waits for a person
        state = result.to_state()
        for item in result.interruptions:
            print("a person must confirm:", item.tool_name, item.raw_item.arguments, flush=True)
            # Decided by a person in warrant (inbox, CLI, API), bound to the exact hash.
            if not await gate.decided(state, item, wait_s=600):
                raise SystemExit(f"nobody decided within 10 minutes (run {run_id})")
        result = await Runner.run(agent, state)
    print("agent:", result.final_output)
    final = {"kind": "final", "answer": result.final_output, "citations": ["tool-1"]}
    done = client.propose(run_id, final, by="support-agent", wait_s=30)
    if done.state != "completed":
        raise SystemExit(f"warrant did not accept the answer: {done.code} {done.message}")
    print("run", run_id, done.run_status)


asyncio.run(main())
