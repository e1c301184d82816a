"""Any MCP client in front of warrant's gate: here the `mcp` package's own client, which
starts `warrant mcp serve` over stdio as its server.

Needs: the demo plug-in's tools where the gateway and the workers run
(`WARRANT_TOOLS=warrant_demo:plugin`: `lookup`), and the deployment's `WARRANT_*` settings in
this process's environment (the gateway is a database client). The session sees only the tools
its template grants; a call warrant does not carry out ends this script with its code.
"""

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


async def main() -> str | None:
    """What went wrong (None: nothing)."""
    async with stdio_client(server) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        tools = (await mcp.list_tools()).tools
        if "lookup" not in {t.name for t in tools}:
            return "the gateway offers no lookup: is WARRANT_TOOLS=warrant_demo:plugin set?"
        for tool in tools:
            print(tool.name, "read-only" if tool.annotations.readOnlyHint else "writes")
        found = await mcp.call_tool("lookup", {"query": "order 42"})
        if found.isError:  # refused, failed, unknown effect: the code comes first
            return f"lookup: {found.content[0].text}"
        print("lookup:", found.content[0].text)
    return None


sys.exit(asyncio.run(main()))  # a message: exit status 1, the message on stderr
