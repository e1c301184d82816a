"""MCP tool pins in the ledger (:class:`~warrant.ledger.models.McpToolPin`): the pin a call
is checked against (its tool's first use pins it) and an operator's acceptance of a new
definition (``warrant mcp accept``), recorded with who and when."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.dialects.postgresql import insert

from warrant.ledger.models import McpToolPin
from warrant.tools._mcp_pins import McpDefinition, changed_fields

__all__ = ["accept_definition", "pinned_definition"]


def _entry(
    definition: McpDefinition, by: str, replaced: str | None, changed: list[str]
) -> dict[str, Any]:
    return {
        "definition_hash": definition.hash,
        "accepted_by": by,
        "accepted_at": datetime.now(UTC).isoformat(),
        "replaced": replaced,
        "changed": changed,
    }


def pinned_definition(
    conn: Connection, definition: McpDefinition, *, run_id: str
) -> tuple[str, dict[str, Any]]:
    """The pinned ``(hash, definition)`` of the definition's tool; none yet: ``definition``
    is pinned now, by its first use (in ``run_id``). One primary-key read when pinned."""
    key = (McpToolPin.server == definition.server, McpToolPin.tool == definition.tool)
    found = conn.execute(select(McpToolPin.definition_hash, McpToolPin.definition).where(*key))
    row = found.first()
    if row is not None:
        return row[0], row[1]
    by = f"first-use:{run_id}"
    conn.execute(
        insert(McpToolPin)
        .values(
            server=definition.server,
            tool=definition.tool,
            definition_hash=definition.hash,
            definition=definition.definition,
            accepted_by=by,
            history=[_entry(definition, by, None, [])],
        )
        .on_conflict_do_nothing()
    )
    row = conn.execute(select(McpToolPin.definition_hash, McpToolPin.definition).where(*key)).one()
    return row[0], row[1]


def accept_definition(engine: Engine, definition: McpDefinition, *, by: str) -> dict[str, Any]:
    """Pin ``definition`` as accepted by ``by`` (replacing any pin; the acceptance is added
    to the pin's ``history``). Returns what was recorded, with the ``replaced`` hash and the
    ``changed`` fields."""
    with engine.begin() as conn:
        key = (McpToolPin.server == definition.server, McpToolPin.tool == definition.tool)
        old = conn.execute(select(McpToolPin).where(*key).with_for_update()).first()
        replaced = old.definition_hash if old is not None else None
        changed = changed_fields(old.definition, definition.definition) if old is not None else []
        entry = _entry(definition, by, replaced, changed)
        history = [*(old.history if old is not None else []), entry]
        values = {
            "definition_hash": definition.hash,
            "definition": definition.definition,
            "accepted_by": by,
            "accepted_at": datetime.now(UTC),
            "history": history,
        }
        stmt = insert(McpToolPin).values(server=definition.server, tool=definition.tool, **values)
        conn.execute(stmt.on_conflict_do_update(index_elements=["server", "tool"], set_=values))
    return {"server": definition.server, "tool": definition.tool, **entry}
