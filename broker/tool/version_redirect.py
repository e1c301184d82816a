"""A command for a tool version this worker does not have: leave it for a worker that does.

During a rolling upgrade the workers consuming ``tool.<name>`` may hold different versions of
the tool (old hosts ``@1``, upgraded ones ``@2``); the queue is shared, so a ``@1`` command can
reach an upgraded host. That worker must not fail the run (it did: an assertion, then
``INTERNAL_ERROR``) and cannot run a contract it does not have. It publishes the same message
again and traces ``tool.delivery.redirected`` (the tool, its version, this worker, and whether a
live worker registered that version); the command stays ``issued`` (or ``started`` by its
holder), so nothing is lost and nothing runs twice. With a live worker that has the version,
the message comes back at once; with none (every old host already gone), every
:data:`NONE_LIVE_RETRY_S` seconds, until a worker with the version registers or the run is
cancelled or ends. The gate refuses new proposals for a version no consumer has
(``TOOL_NOT_DEPLOYED``).
"""

from __future__ import annotations

from typing import Any

from warrant.broker.context import StageContext
from warrant.broker.registration import live_registrations
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.db import session_scope
from warrant.ledger.repo import append_events

__all__ = ["NONE_LIVE_RETRY_S", "SOME_LIVE_RETRY_S", "redirect"]

#: Countdown of the re-published message when some live worker has the version.
SOME_LIVE_RETRY_S = 0.5
#: ... and when none has it (yet).
NONE_LIVE_RETRY_S = 10.0


def redirect(ctx: StageContext, row: Any, *, version: int, worker: str | None) -> str:
    """Re-publish the command's message for a capable worker; the stage's result."""
    key, queue = f"{row.cmd_tool}@{row.cmd_tool_version}", f"tool.{row.cmd_tool}"
    capable = sorted(
        w.node for w in live_registrations(ctx.engine) if queue in w.queues and key in w.tools
    )
    with session_scope(ctx.engine) as s:
        append_events(
            s,
            row.id,
            [
                (
                    "tool.delivery.redirected",
                    {
                        "tool": row.cmd_tool,
                        "tool_version": row.cmd_tool_version,
                        "worker": worker,
                        "capable_workers": capable[:10],
                    },
                )
            ],
            step=row.cmd_step,
            proposal_id=row.cmd_proposal_id,
        )
    ctx.publisher.tool(
        run_id=row.id,
        version=version,
        command_id=row.cmd_id,
        tool=row.cmd_tool,
        soft_time_limit=row.cmd_timeout_s,
        time_limit=row.cmd_timeout_s + HARD_LIMIT_GRACE_S,
        countdown=SOME_LIVE_RETRY_S if capable else NONE_LIVE_RETRY_S,
    )
    return f"redirected:{key}"
