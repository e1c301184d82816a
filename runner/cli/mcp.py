"""``warrant mcp serve``: the gate in front of any MCP client
(:mod:`warrant.runner.server.mcp_gateway`)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from warrant.runner.cli.common import ByOpt, JsonOpt, fail, guard, print_json
from warrant.runner.client.api import Client
from warrant.runner.client.mcp_accept import accept_tool
from warrant.runner.client.tokens import Tokens
from warrant.runner.errors import InvalidRequest, SpecError
from warrant.runner.server.mcp_gateway import Gateway, GatewayOptions, http_app, serve_stdio
from warrant.runner.spec import parse_run_spec
from warrant.tools._plugins import registry_for

__all__ = ["mcp_app"]

mcp_app = typer.Typer(help="warrant as an MCP server (a gateway).", no_args_is_help=True)


def load_template(path: Path) -> dict[str, Any]:
    """The run spec template: a run spec whose planner is (or becomes) ``external``;
    validated now (``SPEC_INVALID`` names the field)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SpecError(
            f"cannot read the run spec template {path}: {exc}",
            errors=[{"field": "(file)", "message": str(exc)}],
        ) from None
    if not isinstance(data, dict):
        raise SpecError(
            f"the run spec template {path} is not a JSON object",
            errors=[{"field": "(root)", "message": "not an object"}],
        )
    data["planner"] = {"kind": "external", "agent": "mcp"}
    parse_run_spec(data)
    return data


@mcp_app.command("serve")
def mcp_serve(
    spec: Annotated[
        Path, typer.Option(help="Run spec template (JSON): goal, subject, grants, budgets.")
    ],
    transport: Annotated[str, typer.Option(help="stdio or http.")] = "stdio",
    host: Annotated[str, typer.Option(help="HTTP: address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="HTTP: port.")] = 8090,
    run_key: Annotated[
        str | None, typer.Option(help="Continue the run of this key (stdio).")
    ] = None,
    identity: Annotated[
        str, typer.Option("--as", help="stdio: who proposes (recorded on every step).")
    ] = "mcp-stdio",
    approval_wait: Annotated[
        float, typer.Option(min=0, max=3600, help="Seconds a call waits for a person.")
    ] = 60.0,
    decision_wait: Annotated[
        float, typer.Option(min=1, max=3600, help="Seconds a call waits for gate and tool.")
    ] = 120.0,
    tools: Annotated[
        str | None, typer.Option(help="Comma-separated tool names to offer (default: all).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the registry's tools (and declared upstream MCP servers' tools) to MCP clients;
    every call is a proposal of the session's run, decided by the gate.

    stdio: `warrant mcp serve --spec run.json` as the client's server command. HTTP:
    `--transport http`, the client sends `Authorization: Bearer <producer token>` to
    http://HOST:PORT/mcp (header `Warrant-Run-Key` continues a run)."""
    if transport not in ("stdio", "http"):
        fail(InvalidRequest("--transport is stdio or http"), as_json)
    gateway, engine = guard(
        as_json, lambda: _gateway(spec, run_key, approval_wait, decision_wait, tools)
    )
    if transport == "stdio":
        import anyio

        anyio.run(lambda: serve_stdio(gateway, identity=identity))
        return
    import uvicorn

    app = http_app(gateway, Tokens(engine))
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)


def _gateway(
    spec: Path, run_key: str | None, approval_wait: float, decision_wait: float, tools: str | None
) -> tuple[Any, Any]:
    """The gateway, over a database-backed client, and that client's engine (the HTTP
    transport's tokens are the ledger's)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)  # stdout may be MCP's
    options = GatewayOptions(
        spec=load_template(spec),
        run_key=run_key,
        approval_wait_s=approval_wait,
        decision_wait_s=decision_wait,
        tools=frozenset(t.strip() for t in tools.split(",") if t.strip()) if tools else None,
    )
    client = Client.from_env(service_name="warrant-mcp", database_only=True)
    return Gateway(client, registry_for(), options), client.engine


@mcp_app.command("accept")
def mcp_accept(
    server: Annotated[str, typer.Argument(help="The server's name in WARRANT_MCP_CONFIG.")],
    tool: Annotated[str, typer.Argument(help="The server's name of the tool.")],
    by: ByOpt,
    as_json: JsonOpt = False,
) -> None:
    """Accept the definition (name, description, inputSchema, annotations) the server serves
    now for a declared tool: its calls, refused with MCP_TOOL_CHANGED since the server changed
    it, go through the gate again. Recorded with who (--by) and when."""
    accepted = guard(as_json, lambda: accept_tool(server, tool, by=by))
    if as_json:
        print_json(accepted)
        return
    changed = ", ".join(accepted["changed"]) or "nothing"
    typer.echo(
        f"accepted {server}/{tool} {accepted['definition_hash']} "
        f"(replaced {accepted['replaced'] or 'no pin'}; changed: {changed})"
    )
