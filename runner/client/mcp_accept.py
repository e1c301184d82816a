"""``warrant mcp accept <server> <tool>``: an operator accepts the definition an MCP server
serves now for one declared tool. The server is asked (``tools/list``), the definition's
hash replaces the tool's pin in the ledger, and the acceptance is recorded with who and when
(the pin's ``history``); the gate then lets the tool's calls through again."""

from __future__ import annotations

import logging
from typing import Any

from warrant.ledger.db import engine_for
from warrant.ledger.mcp_pins import accept_definition
from warrant.runner.errors import NotFound, PluginError
from warrant.runner.settings import WarrantSettings, load_settings, resolved_urls
from warrant.tools._mcp import load_config, server_tools
from warrant.tools._mcp_pins import mcp_definition

__all__ = ["accept_tool"]

log = logging.getLogger("warrant.mcp")


def accept_tool(
    server: str, tool: str, *, by: str, settings: WarrantSettings | None = None
) -> dict[str, Any]:
    """Pin what ``server`` serves now for ``tool`` (the server's name of it), accepted by
    ``by``. Raises ``MCP_CONFIG_INVALID`` (no configuration), ``MCP_SERVER_UNKNOWN``,
    ``MCP_TOOL_UNDECLARED``, ``MCP_TOOL_MISSING`` or ``MCP_SERVER_UNAVAILABLE``."""
    settings = settings or load_settings()
    path = settings.mcp_config
    if path is None:
        raise PluginError(
            "WARRANT_MCP_CONFIG names no MCP configuration", code="MCP_CONFIG_INVALID"
        )
    declared = load_config(path).servers.get(server)
    if declared is None:
        raise NotFound(f"no MCP server {server!r} in {path}", code="MCP_SERVER_UNKNOWN")
    if tool not in declared.tools:
        raise NotFound(
            f"MCP server {server} declares no tool {tool!r} in {path}", code="MCP_TOOL_UNDECLARED"
        )
    only = declared.model_copy(update={"tools": {tool: declared.tools[tool]}})
    definition = mcp_definition(server_tools(path, server, only)[0])
    assert definition is not None  # the server was asked
    accepted = accept_definition(engine_for(resolved_urls(settings)[1]), definition, by=by)
    log.warning(
        "MCP tool %s/%s accepted by %s: %s (replaced %s; changed: %s)",
        server,
        tool,
        by,
        definition.hash,
        accepted["replaced"],
        ", ".join(accepted["changed"]) or "-",
    )
    return accepted
