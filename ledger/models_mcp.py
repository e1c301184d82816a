"""MCP tool pins: the definition of each declared MCP server tool an operator accepted (or
that its first use pinned), by hash. Re-exported by :mod:`warrant.ledger.models`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from warrant.ledger.model_base import JSON, Base
from warrant.ledger.model_base import created_now as _now

__all__ = ["McpToolPin"]


class McpToolPin(Base):
    """One server tool's pinned definition (``warrant.tools.mcp_pins``): the policy gate
    refuses its calls (``MCP_TOOL_CHANGED``) while the server serves another one."""

    __tablename__ = "mcp_tool_pins"

    server: Mapped[str] = mapped_column(String(64), primary_key=True)
    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    """The server's name of the tool."""
    definition_hash: Mapped[str] = mapped_column(String(64))
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Name, description, inputSchema and annotations, as the server served them."""
    accepted_by: Mapped[str] = mapped_column(String(200))
    """Who accepted it: an operator (``warrant mcp accept --by``) or ``first-use:<run id>``."""
    accepted_at: Mapped[datetime] = _now()
    history: Mapped[list[Any]] = mapped_column(JSON)
    """Every acceptance, oldest first: ``definition_hash``, ``accepted_by``, ``accepted_at``,
    ``replaced`` (the hash it replaced, ``None`` for the first) and ``changed`` fields."""
