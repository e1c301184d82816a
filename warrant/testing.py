"""Test a tool in process: its contract, the gate's verdict and the outcome the workers record.

For plug-in authors' own tests (no broker, no database, no worker)::

    from warrant.testing import ToolHarness

    harness = ToolHarness(GET_WEATHER, deps=WeatherClient(fake_url))
    verdict = harness.propose({"city": "Oslo"}, grants=[{"capability": "weather:read"}])
    assert verdict.decision == "accepted"
    outcome = harness.call({"city": "Oslo"})
    assert (outcome.status, outcome.output["city"]) == ("succeeded", "Oslo")

:meth:`ToolHarness.propose` runs the real gate (``warrant.runner.policy.evaluate``) on one
proposal of the tool, for a fresh run with the grants, goal and approvals given;
:meth:`ToolHarness.call` runs the tool's ``precheck`` (if any: a refusal or a check that could
not be made is the outcome, the tool is not called), then its ``execute`` with a real
:class:`ToolContext`, and types
what it returned or raised with the same functions as the tool stage
(``warrant.runner.tool_outcomes``), then checks its postcondition once. What needs the
services is not here: leases, retries, cancellation by signal, reconciliation, compensation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from warrant.runner.codes import Outcome, Phase, RunStatus, StopReason
from warrant.runner.gate import AwaitConfirmation, Decision, GateInput, Halt, Ignore, Reject
from warrant.runner.policy import evaluate
from warrant.runner.provenance import sources_from
from warrant.runner.spec import Budgets, Grant
from warrant.runner.tool_outcomes import (
    Interruption,
    ToolResult,
    bounded_output,
    of_error,
    of_output,
    prechecked,
)
from warrant.runner.views import ConfirmationView, GrantView, RunView
from warrant.tools._contract import PreconditionContext, Tool, ToolContext
from warrant.tools._registry import Registry

__all__ = ["GateVerdict", "ToolHarness", "ToolOutcome"]


@dataclass(frozen=True)
class GateVerdict:
    """What the gate decided about one proposal."""

    decision: str
    """``accepted``, ``refused``, ``needs_confirmation`` or ``halted``."""
    code: str | None = None
    """The refusal's code or the stop reason (``None`` when accepted or asking)."""
    message: str | None = None
    proposal_hash: str | None = None
    """The exact proposal a person approves (``approved=[...]`` of the next ``propose``)."""
    request: dict[str, Any] | None = None
    """What the approver would be shown."""
    events: tuple[str, ...] = ()
    """The gate's trace events, in order."""


@dataclass(frozen=True)
class ToolOutcome:
    """The typed outcome the tool stage would record for one call."""

    status: str
    """``succeeded``, ``rejected``, ``failed``, ``unknown`` or ``accepted`` (a long job)."""
    code: str | None = None
    message: str | None = None
    output: dict[str, Any] | None = None
    retryable: bool = False
    stop_reason: str | None = None
    """What the outcome does to the run (``None``: the planner goes on)."""
    tokens: int = 0
    cost: float = 0.0
    events: tuple[str, ...] = field(default=())


class ToolHarness:
    """One tool, its dependencies and the subject a run acts for."""

    def __init__(self, tool: Tool[Any, Any], *, deps: Any = None, subject: str = "tester") -> None:
        self.tool, self.deps, self.subject = tool, deps, subject
        self.registry = Registry([tool])

    def proposal(self, arguments: Mapping[str, Any], *, reason: str = "") -> dict[str, Any]:
        """The proposal a planner would make for this call."""
        return {
            "kind": "tool",
            "proposal_id": "p1",
            "tool": self.tool.name,
            "tool_version": self.tool.version,
            "arguments": dict(arguments),
            "reason_summary": reason,
            "source_observation_ids": [],
        }

    def propose(
        self,
        arguments: Mapping[str, Any],
        *,
        grants: Iterable[Mapping[str, Any] | Grant] = (),
        goal: str = "",
        untrusted: Mapping[str, str] | None = None,
        approved: Iterable[str] = (),
        observed: Iterable[tuple[Tool[Any, Any], Any]] = (),
    ) -> GateVerdict:
        """The gate's verdict on a call with these ``arguments``, for a run holding ``grants``
        (as in a run spec), whose goal is ``goal``, that read ``untrusted`` text (observation
        id → text) and the ``observed`` outputs of other tools (``(tool, output)`` in the order
        read: each trusted or not, and attributed, as that tool's contract says), and whose
        person approved the proposal hashes in ``approved``."""
        now = time.time()
        inp = GateInput(
            raw=self.proposal(arguments),
            run=_fresh_run(self.subject, now),
            expected_version=1,
            grants=[_grant_view(i, g) for i, g in enumerate(grants, start=1)],
            confirmations=[_approval(h, self.tool.name, now) for h in approved],
            history=[],
            registry=self.registry,
            now=now,
            provenance=_sources(goal, untrusted or {}, list(observed)),
        )
        return _verdict(evaluate(inp))

    def call(
        self,
        arguments: Mapping[str, Any],
        *,
        token: str = "test-token",
        attempt: int = 1,
        cancelled: bool = False,
        timeout_s: float | None = None,
    ) -> ToolOutcome:
        """Run the tool once with these (valid) ``arguments`` and type what it did. Arguments
        the input schema refuses raise pydantic's ``ValidationError`` (the gate refuses them
        before any worker calls the tool)."""
        args = self.tool.parse_input(dict(arguments))
        context = ToolContext(
            run_id="run-test",
            command_id=f"cmd-{uuid.uuid4().hex[:8]}",
            subject=self.subject,
            idempotency_token=token,
            attempt=attempt,
            deadline_at=time.time() + (timeout_s or self.tool.timeout_s),
            deps=self.deps,
            is_cancelled=lambda **_: cancelled,
        )
        if self.tool.precheck is not None:  # the tool stage's first step, with these deps
            reading = PreconditionContext(run_id="run-test", subject=self.subject, deps=self.deps)
            refusal = prechecked(self.tool, dict(arguments), reading, attempt=attempt)
            if refusal is not None:
                return _outcome(refusal, tokens=0, cost=0.0)
        try:
            out = self.tool.execute(args, context)
        except Exception as exc:
            said = self.tool.outcome_message(str(exc), dict(arguments)) if str(exc) else None
            result = of_error(self.tool, exc, said=said, seen=Interruption(cancelled=cancelled))
        else:
            result = self._checked(args, out, context)
        usage = context.reported_usage
        return _outcome(result, tokens=usage.tokens, cost=usage.cost)

    def _checked(self, args: Any, out: Any, context: ToolContext) -> ToolResult:
        result, validated = of_output(self.tool, out)
        verify = self.tool.verify
        if validated is not None and verify is not None and not verify(args, validated, context):
            result.code = "TOOL_POSTCONDITION_FAILED"
            result.events.append(("tool.postcondition.checked", {"ok": False}))
            result.stop = StopReason.TOOL_POSTCONDITION_FAILED
        result.output, cut = bounded_output(result.output, self.tool.max_output_bytes)
        if cut is not None:  # checked whole, kept bounded: as the workers keep it
            result.events.append(
                ("tool.output.truncated", {"original_bytes": cut["original_bytes"]})
            )
        return result


def _fresh_run(subject: str, now: float) -> RunView:
    return RunView(
        run_id="run-test",
        status=RunStatus.RUNNING,
        phase=Phase.POLICY,
        version=1,
        step=1,
        model_calls=1,
        tool_calls=0,
        observation_version=1,
        deadline_at=now + 3600,
        subject=subject,
        budgets=Budgets(),
    )


def _grant_view(grant_id: int, given: Mapping[str, Any] | Grant) -> GrantView:
    grant = given if isinstance(given, Grant) else Grant.model_validate(dict(given))
    return GrantView(
        grant_id=grant_id,
        run_id="run-test",
        capability=grant.capability,
        resource_scope=grant.resource_scope,
        expires_at_step=grant.expires_at_step,
        max_uses=grant.max_uses,
        uses=0,
        destinations_from=tuple(grant.destinations_from or ()),
        expires_at=grant.expires_at.timestamp() if grant.expires_at is not None else None,
        constraints=grant.constraints,
    )


def _approval(proposal_hash: str, tool: str, now: float) -> ConfirmationView:
    return ConfirmationView(
        confirmation_id=f"c-{proposal_hash[:8]}",
        run_id="run-test",
        proposal_hash=proposal_hash,
        tool=tool,
        approved=True,
        used=False,
        expires_at_step=10,
        expires_at=now + 600,
    )


def _sources(
    goal: str, untrusted: Mapping[str, str], observed: list[tuple[Tool[Any, Any], Any]]
) -> Any:
    observations: list[list[Any]] = [["user-1", "user", {"goal": goal}]]
    observations += [[oid, "untrusted-content", {"text": text}] for oid, text in untrusted.items()]
    observations += [
        [f"tool-{i}", tool.output_source.value, {"tool": tool.name, "output": output}]
        for i, (tool, output) in enumerate(observed, start=1)
    ]
    attributions = {t.name: t.attribution for t, _ in observed if t.attribution is not None}
    listings = {t.name: t.listing for t, _ in observed if t.listing}
    privates = {t.name: t.private for t, _ in observed if t.private}
    return sources_from(
        goal, {}, observations, attributions=attributions, listings=listings, privates=privates
    )


def _verdict(decision: Decision) -> GateVerdict:
    events = tuple(e.name for e in getattr(decision, "events", ()))
    if isinstance(decision, Reject):
        return GateVerdict("refused", decision.code, decision.message, events=events)
    if isinstance(decision, Halt):
        return GateVerdict("halted", decision.reason.value, None, events=events)
    if isinstance(decision, AwaitConfirmation):
        return GateVerdict(
            "needs_confirmation",
            proposal_hash=decision.proposal_hash,
            request=decision.request(),
            events=events,
        )
    if isinstance(decision, Ignore):
        return GateVerdict("ignored", None, decision.reason)
    return GateVerdict("accepted", proposal_hash=decision.proposal_hash, events=events)


def _outcome(result: ToolResult, *, tokens: int, cost: float) -> ToolOutcome:
    status = result.status.value if isinstance(result.status, Outcome) else str(result.status)
    return ToolOutcome(
        status=status,
        code=result.code,
        message=result.message,
        output=result.output,
        retryable=result.retryable,
        stop_reason=result.stop.value if result.stop is not None else None,
        tokens=tokens,
        cost=cost,
        events=tuple(name for name, _ in result.events),
    )
