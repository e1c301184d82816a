"""The proposal methods of :class:`~warrant.runner.client.remote.RemoteClient`: the same
signatures and return types as :class:`~warrant.runner.client.proposals.ProposalsClient`,
over ``/v1/runs/{id}/proposals`` (the proposer is the token's label; ``by`` is ignored)."""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Any

from warrant.runner.external import Decision
from warrant.runner.spec import Usage

__all__ = ["RemoteProposals", "decision_from"]

#: The longest one long poll is asked to last (the server allows up to 60 s).
MAX_POLL_S = 30.0

_FIELDS = frozenset(f.name for f in fields(Decision))


def decision_from(data: dict[str, Any]) -> Decision:
    """A :class:`Decision` from a ``DecisionStateOut`` body."""
    return Decision(**{k: v for k, v in data.items() if k in _FIELDS})


class RemoteProposals:
    _call: Any  # RemoteClient's transport

    def propose(
        self,
        run_id: str,
        proposal: dict[str, Any],
        *,
        by: str = "",
        step: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
        wait_s: float = 0.0,
    ) -> Decision:
        """``POST /v1/runs/{id}/proposals``, then (with ``wait_s``) its long poll."""
        if isinstance(usage, Usage):
            usage = usage.model_dump()
        body = {"proposal": proposal, "step": step, "usage": usage}
        poll = min(wait_s, MAX_POLL_S)
        data = self._call(
            "POST",
            f"/runs/{run_id}/proposals",
            json={k: v for k, v in body.items() if v is not None},
            params={"wait": poll},
            timeout=poll + 30.0,
        )
        decision = decision_from(data)
        if wait_s > poll and decision.state == "pending":
            return self.decision(run_id, decision.step, wait_s=wait_s - poll)
        return decision

    def decision(
        self, run_id: str, step: int, *, wait_s: float = 0.0, seen: str = "pending"
    ) -> Decision:
        """``GET /v1/runs/{id}/proposals/{step}``, long-polled in pieces of at most
        :data:`MAX_POLL_S` until its state is not ``seen`` or ``wait_s`` passed."""
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            poll = min(MAX_POLL_S, max(0.0, deadline - time.monotonic()))
            data = self._call(
                "GET",
                f"/runs/{run_id}/proposals/{step}",
                params={"wait": round(poll, 3), "seen": seen},
                timeout=poll + 30.0,
            )
            decision = decision_from(data)
            if decision.state != seen or time.monotonic() >= deadline:
                return decision
