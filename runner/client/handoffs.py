"""The client's handoffs: list and read the runs handed to a person, and let that person end
one. One part of :class:`warrant.runner.client.api.Client`."""

from __future__ import annotations

from typing import Any

from warrant.ledger import reads
from warrant.ledger.db import retry_once_on_disconnect, session_scope
from warrant.ledger.models import Handoff
from warrant.ledger.operator import lock_handoff, lock_run, mark_handoff_resolved
from warrant.ledger.repo import commit, run_view
from warrant.runner import run_machine as machine
from warrant.runner.client.runs import RunInfo, RunsClient
from warrant.runner.codes import RunStatus
from warrant.runner.errors import HandoffNotFound, InvalidRequest, StateConflict

__all__ = ["RESOLUTIONS", "HandoffsClient"]

RESOLUTIONS = ("completed", "failed", "cancelled")


def _handoff_dict(h: Handoff) -> dict[str, Any]:
    return {
        "handoff_id": h.id,
        "run_id": h.run_id,
        "reason": h.reason,
        "created_at": h.created_at.isoformat(),
        "resolved_at": h.resolved_at.isoformat() if h.resolved_at else None,
        "resolved_by": h.resolved_by,
        "resolution": h.resolution,
        "resolution_reason": h.resolution_reason,
        "bundle": h.bundle,
    }


class HandoffsClient(RunsClient):
    """Runs handed to a person: the open ones, one bundle, and its resolution."""

    @retry_once_on_disconnect
    def handoffs(self, *, open_only: bool = True, limit: int = 50) -> list[dict[str, Any]]:
        with session_scope(self.engine) as s:
            rows = reads.handoffs(s, open_only=open_only, limit=limit)
            return [_handoff_dict(h) for h in rows]

    @retry_once_on_disconnect
    def handoff(self, handoff_id: str) -> dict[str, Any]:
        with session_scope(self.engine) as s:
            h = reads.handoff_by_id_or_run(s, handoff_id)
            if h is None:
                raise HandoffNotFound(f"no handoff {handoff_id}")
            return _handoff_dict(h)

    def resolve_handoff(self, handoff_id: str, *, outcome: str, by: str, reason: str) -> RunInfo:
        """A person ends the run: a command through the state machine (compare-and-set on
        the version, recorded with identity and reason), never a raw status edit."""
        if outcome not in RESOLUTIONS:
            raise InvalidRequest(
                f"outcome must be one of {', '.join(RESOLUTIONS)}", code="INVALID_RESOLUTION"
            )
        if not by.strip() or not reason.strip():
            raise InvalidRequest(
                "a resolution needs who (--by) and why (--reason)",
                code="RESOLUTION_IDENTITY_REQUIRED",
            )
        with session_scope(self.engine) as s:
            h = lock_handoff(s, self.handoff(handoff_id)["handoff_id"])
            assert h is not None
            run = lock_run(s, h.run_id)
            assert run is not None
            if h.resolved_at is not None or run.status != RunStatus.HANDOFF:
                raise StateConflict(
                    f"handoff {h.id} is already resolved", code="HANDOFF_ALREADY_RESOLVED"
                )
            mark_handoff_resolved(h, by=by, outcome=outcome, reason=reason)
            resolved = {
                "handoff_id": h.id,
                "by": by,
                "outcome": outcome,
                "reason_chars": len(reason),
            }
            change = machine.resolve(
                run_view(run),
                outcome=RunStatus(outcome),
                by=by,
                resolved=resolved,
                previous_reason=run.stop_reason,
            )
            commit(s, change, step=run.step)
            run_id = run.id
        return self.get_run(run_id)
