"""What an MCP tool is pinned by: the hash of its definition as its server serves it (name,
description, input schema, annotations). The first use pins it in the ledger; a server that
later serves another definition gets its calls refused (``MCP_TOOL_CHANGED``) until an
operator accepts the new one (``warrant mcp accept``). See docs/policy-version.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warrant.runner.canonical import canonical_json, sha256_hex
from warrant.tools._contract import Tool

__all__ = ["PINNED_FIELDS", "McpDefinition", "changed_fields", "definition_of", "mcp_definition"]

#: The parts of a server's tool listing a pin covers.
PINNED_FIELDS = ("name", "description", "inputSchema", "annotations")


@dataclass(frozen=True)
class McpDefinition:
    """One server tool's definition as the server served it, and its hash."""

    server: str
    tool: str
    """The server's name of the tool (the key of the configuration's ``tools``)."""
    definition: dict[str, Any]
    hash: str


def _annotations(remote: Any) -> dict[str, Any] | None:
    annotations = getattr(remote, "annotations", None)
    if annotations is None:
        return None
    if hasattr(annotations, "model_dump"):
        dumped: dict[str, Any] = annotations.model_dump(mode="json", exclude_none=True)
        return dumped
    return dict(annotations)


def definition_of(server: str, remote: Any) -> McpDefinition:
    """The definition of ``remote`` (an ``mcp.types.Tool`` of a ``tools/list`` answer)."""
    definition = {
        "name": remote.name,
        "description": getattr(remote, "description", None),
        "inputSchema": dict(remote.inputSchema or {}),
        "annotations": _annotations(remote),
    }
    return McpDefinition(server, remote.name, definition, sha256_hex(canonical_json(definition)))


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Which of :data:`PINNED_FIELDS` differ between two definitions."""
    return [f for f in PINNED_FIELDS if canonical_json(old.get(f)) != canonical_json(new.get(f))]


def mcp_definition(tool: Tool[Any, Any]) -> McpDefinition | None:
    """The served definition an MCP tool of the full registry carries (``None``: no MCP
    tool, or one of the declared registry, whose server was not asked)."""
    found = getattr(tool.execute, "definition", None)
    return found if isinstance(found, McpDefinition) else None
