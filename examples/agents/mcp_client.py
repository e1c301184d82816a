"""Any MCP client in front of warrant's gate: here the `mcp` package's own client, which
starts `warrant mcp serve` over stdio as its server."""

import asyncio
import json
import os
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

template = {  # the run each MCP session gets: its goal, subject, grants and budgets
    "goal": "Answer questions about orders.",
    "subject": "customer-42",
    "grants": [{"capability": "lookup:read"}],
    "budgets": {"max_steps": 10},
}
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as spec:
    json.dump(template, spec)
server = StdioServerParameters(
    command=sys.executable,
    args=["-m", "warrant.runner.cli", "mcp", "serve", "--spec", spec.name],
    env=dict(os.environ),  # the deployment's WARRANT_* settings (mcp passes only a few)
)


async def main() -> None:
    async with stdio_client(server) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        for tool in (await mcp.list_tools()).tools:
            print(tool.name, "read-only" if tool.annotations.readOnlyHint else "writes")
        found = await mcp.call_tool("lookup", {"query": "order 42"})
        print("lookup:", found.content[0].text)
        refused = await mcp.call_tool(  # not granted: the gate refuses it, with its code
            "send_notice", {"recipient": "jo@example.com", "body": "Your refund is on its way."}
        )
        print("send_notice:", refused.isError, refused.content[0].text)


asyncio.run(main())
