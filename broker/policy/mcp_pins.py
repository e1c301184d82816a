"""The policy gate's ``pins`` question (:class:`warrant.runner.gate.GateInput`): is the MCP
tool's definition, as the policy worker's registry got it from its server, the pinned one?
The first use of a tool pins it; afterwards another definition is refused
(``MCP_TOOL_CHANGED``) until an operator accepts it (``warrant mcp accept``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from warrant.ledger.mcp_pins import pinned_definition
from warrant.ledger.stage_loads import autocommit
from warrant.tools.contract import Tool
from warrant.tools.mcp_pins import changed_fields, mcp_definition
from warrant.tools.registry import Registry

__all__ = ["pin_check", "pin_refusals"]


def pin_refusals(
    engine: Engine, registry: Registry, run_id: str, tool: str | None, version: str | None
) -> dict[str, str]:
    """The gate's ``pins`` for a proposal of ``tool@version``: why its served definition is
    not the pinned one, keyed ``name@version`` (empty: no MCP tool, or pinned)."""
    found = registry.get(tool, version) if tool and version else None
    if found is None:
        return {}
    why = pin_check(engine, run_id)(found)
    return {} if why is None else {f"{found.name}@{found.version}": why}


def pin_check(engine: Engine, run_id: str) -> Callable[[Tool[Any, Any]], str | None]:
    """``why(tool)``: ``None`` when ``tool`` is no MCP tool or its definition is pinned, else
    what changed with the pinned and the served hash (a ledger read for MCP tools only)."""

    def why(tool: Tool[Any, Any]) -> str | None:
        served = mcp_definition(tool)
        if served is None:
            return None
        with autocommit(engine) as conn:
            pinned_hash, pinned = pinned_definition(conn, served, run_id=run_id)
        if pinned_hash == served.hash:
            return None
        changed = ", ".join(changed_fields(pinned, served.definition)) or "definition"
        return (
            f"MCP server {served.server} serves another definition of {served.tool} than the "
            f"one accepted ({changed} changed; pinned {pinned_hash}, served {served.hash}): "
            f"an operator accepts it with `warrant mcp accept {served.server} {served.tool}`"
        )

    return why
