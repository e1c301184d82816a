"""A tool's own permission refusal that asks (``policy.on_missing_grant: "ask"``): the tool
stage turns it into a wait for a grant, and the policy stage, once the same proposal is
accepted after the grant, issues the refused command again with a new idempotency token. The
rule and why it is safe: :mod:`warrant.runner.permission_wait`."""

from __future__ import annotations

import dataclasses
from typing import Any

from warrant.broker.context import StageContext
from warrant.broker.tool._call import Snapshot
from warrant.ledger.guarded import insert_command, rearm_command
from warrant.ledger.repo import Guarded
from warrant.ledger.stage_loads import autocommit, command_proposal
from warrant.runner.codes import Outcome
from warrant.runner.permission_wait import (
    PERMISSION_DENIED,
    GrantWait,
    asks_after_refusal,
    token_after_refusal,
    tool_grant_request,
)
from warrant.runner.tool_outcomes import ToolResult
from warrant.tools._contract import Tool

__all__ = ["command_write", "with_grant_wait"]

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
    """The accepted proposal's command: a new row, or the refused one issued again with a
    new idempotency token (the refused attempt's would get its stored refusal back)."""
    if prior is None:
        return insert_command(values)
    token = token_after_refusal(prior.idempotency_token, attempt=prior.attempts)
    kept = {k: values[k] for k in _REISSUED if k in values}
    return rearm_command(prior.id, {**kept, "idempotency_token": token})
