"""What the tool stage reads before running a call whose tool has a precondition read
(``Tool.precondition``): the fingerprint the approver's confirmation is bound to (migration
0021) and the pending proposal's row, which a moved state copies into a new request."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from warrant.ledger._compiled import Compiled

__all__ = ["PROPOSAL_COPIED", "approved_state"]

#: The proposal columns a request asked again carries over (``broker.tool.preconditions``).
PROPOSAL_COPIED = (
    "proposal_id",
    "kind",
    "tool",
    "tool_version",
    "raw",
    "arguments",
    "fingerprint",
    "proposal_hash",
    "confirmation_request",
    "provenance",
)

_APPROVED = Compiled.text(
    "SELECT "
    + ", ".join(f"p.{c}" for c in PROPOSAL_COPIED)
    + ", cf.precondition_fingerprint AS approved_fingerprint"
    " FROM commands c JOIN proposals p ON p.id = c.proposal_pk"
    " LEFT JOIN confirmations cf ON cf.id = c.confirmation_id"
    " WHERE c.id = %(command_id)s"
)


def approved_state(conn: Connection, command_id: str) -> Any:
    """The command's proposal (the :data:`PROPOSAL_COPIED` columns) and
    ``approved_fingerprint``: the precondition its confirmation was given on (None when the
    read failed at the request, or there is no such confirmation). None without the command."""
    return _APPROVED.first(conn, {"command_id": command_id})
