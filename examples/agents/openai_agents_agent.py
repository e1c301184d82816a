"""An OpenAI Agents SDK agent keeps its loop; warrant's gate decides each of its tool calls."""

import asyncio
import os

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from warrant import Client
from warrant.contrib.openai_agents import WarrantTools

set_tracing_disabled(True)  # this example exports no traces to OpenAI
client = Client.from_env()
run_id = client.start_run(
    {
        "goal": "Tell the customer of order 42 that their refund is on its way.",
        "subject": "customer-42",
        "planner": {"kind": "external", "agent": "openai-agents"},
        "grants": [{"capability": "lookup:read"}, {"capability": "notices:send"}],
    }
)
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
            print("a person must confirm:", item.tool_name, item.raw_item.arguments)
            # A person decides (here: yes); warrant records it, bound to the exact hash.
            await gate.approve(state, item, by="alice")
        result = await Runner.run(agent, state)
    print("agent:", result.final_output)
    final = {"kind": "final", "answer": result.final_output, "citations": ["tool-1"]}
    done = client.propose(run_id, final, by="support-agent", wait_s=30)
    print("run", run_id, done.run_status)


asyncio.run(main())
