"""Proposals from the caller: an agent that runs its own loop uses warrant as its gate.

run_id = client.start_run({"goal": ..., "subject": ..., "planner": {"kind": "external"},
                           "grants": [...]})
decision = client.propose(run_id, {"kind": "tool", "proposal_id": "p1", "tool": "http_get",
                                   "tool_version": "1.0.0", "arguments": {...}}, by="my-agent")
decision = client.decision(run_id, decision.step, wait_s=30)   # until it settles

``call_id`` (the agent framework's tool-call id, or any key the caller keeps with the call)
makes a retry safe: the same key returns the same step's decision, never a second command,
across processes and restarts; the same key with another call is ``IDEMPOTENCY_KEY_REUSED``.

One part of :class:`warrant.runner.client.api.Client`; the decisions are
:class:`warrant.runner.external.Decision` (see there for their states).
"""

from __future__ import annotations

import time
from typing import Any

from warrant.broker import telemetry
from warrant.ledger.db import session_scope
from warrant.ledger.external_proposals import record_external_proposal
from warrant.ledger.proposal_facts import step_facts
from warrant.runner.client.runs import RunsClient
from warrant.runner.errors import InvalidRequest, RunNotFound
from warrant.runner.external import Decision, check_shape, decision_of
from warrant.runner.spec import Usage
from warrant.tools._plugins import registry_for

__all__ = ["MAX_DECISION_WAIT_S", "ProposalsClient"]

#: The longest one :meth:`ProposalsClient.decision` call waits.
MAX_DECISION_WAIT_S = 600.0
FIRST_PAUSE_S = 0.02
MAX_PAUSE_S = 0.5


class ProposalsClient(RunsClient):
    """Submit a proposal for a run whose planner kind is ``external``; read its decision."""

    def propose(
        self,
        run_id: str,
        proposal: dict[str, Any],
        *,
        by: str = "",
        step: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
        wait_s: float = 0.0,
        call_id: str | None = None,
    ) -> Decision:
        """Record ``proposal`` as the run's next step and return its decision, waiting up to
        ``wait_s`` for it to leave ``pending``. A retry replays instead of proposing twice
        when it names ``step`` (the step the caller means) or ``call_id`` (the caller's key of
        the call; a parallel proposal's calls may carry their own ``call_id``). Raises
        ``PROPOSAL_IN_FLIGHT`` while an earlier proposal is still undecided,
        ``RUN_NOT_EXTERNAL`` for a run with its own planner, ``RUN_FINISHED`` once the run
        ended, ``IDEMPOTENCY_KEY_REUSED`` for a key that named another call."""
        if not by.strip():
            raise InvalidRequest("a proposal needs who made it", code="IDENTITY_REQUIRED")
        usage = Usage.model_validate(usage) if isinstance(usage, dict) else usage
        check_shape(proposal)
        final = proposal.get("kind") == "final"  # only a final's success check needs these
        unverified = registry_for(ask_mcp_servers=False).unverified() if final else frozenset()
        recorded = record_external_proposal(
            self.engine,
            self.publisher,
            run_id,
            proposal,
            by=by,
            step=step,
            usage=usage,
            clock=self._db_clock,
            call_id=call_id,
            unverified=unverified,
        )
        if recorded.message is not None:
            from warrant.broker.publish import Outbox  # lazy: it imports Celery (~150 ms)

            outbox = Outbox()  # not taken by the broker: logged, the stalled-run sweep resends
            outbox.add(recorded.message)
            with telemetry.run_context(recorded.trace_id):
                outbox.flush()
        submitted = recorded.submitted
        if submitted.stop is not None:
            status, reason = submitted.stop
            return Decision(
                run_id=run_id, step=submitted.step, state="stopped", code=reason, run_status=status
            )
        return self.decision(run_id, submitted.step, branch=submitted.branch, wait_s=wait_s)

    def decision(
        self,
        run_id: str,
        step: int,
        *,
        branch: int = 0,
        wait_s: float = 0.0,
        seen: str = "pending",
    ) -> Decision:
        """The ledger polled with a growing pause, for :data:`MAX_DECISION_WAIT_S` at most
        (``branch``: one call of a parallel step)."""
        if step < 1:
            raise InvalidRequest("steps count from 1", code="STEP_INVALID")
        deadline = time.monotonic() + min(max(wait_s, 0.0), MAX_DECISION_WAIT_S)
        pause = FIRST_PAUSE_S
        while True:
            with session_scope(self.engine) as s:
                facts = step_facts(s, run_id, step, branch=branch)
            if facts is None:
                raise RunNotFound(f"no run {run_id}")
            decision = decision_of(run_id, step, facts, branch=branch)
            left = deadline - time.monotonic()
            if decision.state != seen or left <= 0:
                return decision
            time.sleep(min(pause, left))
            pause = min(pause * 1.5, MAX_PAUSE_S)
