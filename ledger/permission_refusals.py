"""The ledger's reads for a tool's own permission refusal (``warrant.runner.permission_wait``):
what the tool stage needs to turn one into a wait for a grant, and the refused command the
policy stage issues again once the same proposal is accepted after the grant. Both run only
on that rare path, never on the hot one."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from warrant.ledger._compiled import Compiled

__all__ = ["refusal_facts", "refused_command"]

_FACTS = Compiled.text(
    """
SELECT r.spec -> 'policy' ->> 'on_missing_grant' AS on_missing_grant,
       c.proposal_pk, p.proposal_hash
  FROM commands c JOIN runs r ON r.id = c.run_id JOIN proposals p ON p.id = c.proposal_pk
 WHERE c.id = %(command_id)s
"""
)

_REFUSED = Compiled.text(
    """
SELECT c.id, c.idempotency_token, c.attempts, c.status
  FROM commands c
 WHERE c.run_id = %(run_id)s AND c.step = %(step)s AND c.proposal_pk = %(proposal_pk)s
"""
)


def refusal_facts(conn: Connection, command_id: str) -> Any:
    """The run's ``policy.on_missing_grant`` (``None`` when not set), the command's proposal
    row id and the proposal's hash; ``None`` if there is no such command."""
    return _FACTS.first(conn, {"command_id": command_id})


def refused_command(conn: Connection, *, run_id: str, step: int, proposal_pk: int) -> Any:
    """The command already issued for this proposal (``id``, ``idempotency_token``,
    ``attempts``, ``status``): one exists only when its tool refused it for a permission and
    the run waited for a grant. ``None`` otherwise."""
    return _REFUSED.first(conn, {"run_id": run_id, "step": step, "proposal_pk": proposal_pk})
