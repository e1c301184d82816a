"""The registry's tools as MCP tools: name, description, input schema and the annotations a
client shows its user, derived from the contract (never declared twice).

``readOnlyHint``     the tool only reads (side effect ``read``);
``destructiveHint``  it may change the world in a way a retry or an undo cannot take back
                     (``irreversible`` or ``compensatable-write``);
``idempotentHint``   calling it again with the same arguments changes nothing more (``read``,
                     ``idempotent-write``);
``openWorldHint``    it talks to hosts outside the deployment (its contract names an egress).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcp import types

from warrant.runner.client.external_calls import newest_tools
from warrant.tools._contract import SideEffect, Tool

__all__ = ["annotations_of", "mcp_tool", "mcp_tools"]

_DESTRUCTIVE = frozenset({SideEffect.IRREVERSIBLE, SideEffect.COMPENSATABLE_WRITE})
_IDEMPOTENT = frozenset({SideEffect.READ, SideEffect.IDEMPOTENT_WRITE})


def annotations_of(tool: Tool[Any, Any]) -> types.ToolAnnotations:
    read = tool.side_effect is SideEffect.READ
    return types.ToolAnnotations(
        title=tool.name,
        readOnlyHint=read,
        destructiveHint=False if read else tool.side_effect in _DESTRUCTIVE,
        idempotentHint=tool.side_effect in _IDEMPOTENT,
        openWorldHint=bool(tool.egress),
    )


def mcp_tool(tool: Tool[Any, Any]) -> types.Tool:
    described = tool.describe()
    note = f" [warrant: {tool.side_effect.value}; confirmation {tool.confirmation.value}]"
    return types.Tool(
        name=tool.name,
        description=(tool.description or tool.name) + note,
        inputSchema=described["inputSchema"],
        annotations=annotations_of(tool),
        _meta={"warrant/version": tool.version, "warrant/capabilities": list(tool.capabilities)},
    )


def mcp_tools(registry: Iterable[Tool[Any, Any]], *, only: frozenset[str] | None) -> list[Any]:
    """One MCP tool per tool name (its newest version), sorted, limited to ``only``."""
    newest = newest_tools(t for t in registry if only is None or t.name in only)
    return [mcp_tool(newest[name]) for name in sorted(newest)]
