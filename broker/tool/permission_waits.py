"""A tool's own permission refusal that asks (``policy.on_missing_grant: "ask"``): the tool
stage turns it into a wait for a grant, and the policy stage, once the same proposal is
accepted after the grant, issues the refused command again with the same idempotency token;
the tool stage then asks a tool with ``reconcile`` about that token before it calls it again.
The rule and why it is safe: :mod:`warrant.runner.permission_wait`."""

from __future__ import annotations

import dataclasses
from typing import Any

from warrant.broker.context import StageContext
from warrant.broker.tool._call import Snapshot
from warrant.ledger.guarded import insert_command, rearm_command
from warrant.ledger.repo import Guarded
from warrant.ledger.stage_loads import autocommit, command_proposal, outcome_code
from warrant.runner.codes import Outcome
from warrant.runner.permission_wait import (
    PERMISSION_DENIED,
    GrantWait,
    asks_after_refusal,
    reconcile_first,
    tool_grant_request,
)
from warrant.runner.tool_outcomes import ToolResult
from warrant.tools._contract import Tool

__all__ = ["command_write", "reconciles_first", "with_grant_wait"]

#: What an accepted proposal's command row gets anew when it is issued again.
_REISSUED = (
    "tool_version",
    "arguments",
    "arguments_hash",
    "timeout_s",
    "deadline_at",
    "confirmation_id",
    "grant_ids",
)


def with_grant_wait(
    ctx: StageContext, snap: Snapshot, tool: Tool[Any, Any], res: ToolResult
) -> ToolResult:
    """``res`` with its :class:`GrantWait` when it is a permission refusal in a run that asks
    (one read, for such a refusal only); ``res`` itself otherwise."""
    if res.status is not Outcome.REJECTED or res.code != PERMISSION_DENIED:
        return res
    with autocommit(ctx.engine) as conn:
        facts = command_proposal(conn, snap.command_id)
    if facts is None or not asks_after_refusal(
        facts.on_missing_grant, status=res.status, code=res.code
    ):
        return res
    request = tool_grant_request(
        tool=tool.name,
        tool_version=tool.version,
        details=res.output,
        message=res.message,
        step=snap.step,
        proposal_id=snap.proposal_id,
        proposal_hash=facts.proposal_hash,
        command_id=snap.command_id,
        attempt=snap.attempt,
    )
    return dataclasses.replace(res, grant_wait=GrantWait(request, facts.proposal_pk))


def command_write(prior: Any | None, values: dict[str, Any]) -> Guarded:
    """The accepted proposal's command: a new row, or the refused one issued again, with
    its own idempotency token (a service that applied part of the refused call sees the same
    key again)."""
    if prior is None:
        return insert_command(values)
    kept = {k: values[k] for k in _REISSUED if k in values}
    whole = {**values, "id": prior.id, "idempotency_token": prior.idempotency_token}
    return rearm_command(prior.id, kept, row=whole)


def reconciles_first(ctx: StageContext, snap: Snapshot, tool: Tool[Any, Any]) -> bool:
    """Is the tool asked about the token before this attempt calls it
    (:func:`warrant.runner.permission_wait.reconcile_first`)? One read, only for a later
    attempt of a tool that could be (one with ``reconcile``): the earlier attempt's code."""
    if not reconcile_first(tool, attempt=snap.attempt, previous_code=PERMISSION_DENIED):
        return False
    with autocommit(ctx.engine) as conn:
        previous = outcome_code(conn, snap.command_id, attempt=snap.attempt - 1)
    return reconcile_first(tool, attempt=snap.attempt, previous_code=previous)
