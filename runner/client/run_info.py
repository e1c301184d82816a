"""What a run looks like from the outside (:class:`RunInfo`), and when waiting for it ends."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from warrant.runner.codes import BUDGET_STOPS, RunStatus
from warrant.runner.spec import granted_capabilities
from warrant.runner.views import request_as_shown

if TYPE_CHECKING:
    from warrant.ledger.models import Run

__all__ = ["SETTLED", "RunInfo"]

#: Statuses at which :meth:`Client.wait` returns (nothing moves without outside input).
SETTLED = frozenset(
    {
        *(s.value for s in RunStatus if s.terminal),
        RunStatus.NEEDS_INPUT.value,
        RunStatus.WAITING_CONFIRMATION.value,
        RunStatus.WAITING_GRANT.value,
        RunStatus.HANDOFF.value,
    }
)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    status: str
    phase: str
    stop_reason: str | None
    step: int
    model_calls: int
    tool_calls: int
    version: int
    answer: str | None
    goal: str
    subject: str
    created_at: str
    finished_at: str | None
    confirmation_request: dict[str, Any] | None = None
    pre_approvals: list[dict[str, Any]] = field(default_factory=list)
    """What was approved ahead of time (``used_at`` once a proposal used it)."""
    idempotency_key: str | None = None
    """The key the run was started with (the same key again returns this run)."""
    started_by: str | None = None
    """Who started it, if known (an API token's ``Identity.label``)."""
    waiting_for_grant: dict[str, Any] | None = None
    """While ``waiting_grant``: the tool, the capabilities it lacks (``capability`` the first),
    the resources, the step, ``proposal_id``, ``proposal_hash``, the refusal ``code`` and its
    ``source`` (``gate``, or ``tool`` for a tool's own permission refusal: then also its
    ``message``, ``command_id`` and ``attempt``; docs/refusals-that-ask.md)."""
    trace_id: str | None = None
    """The run's OpenTelemetry trace id (32 hex digits) when tracing was on at its start:
    every stage and re-publish of the run continues this one trace."""
    tokens_used: int = 0
    """Tokens charged so far: the planner's model calls (reported or estimated) and the usage
    tools reported (the ``max_tokens`` budget counts these)."""
    cost_used: float = 0.0
    """Cost charged so far, likewise (the ``max_cost`` budget counts it)."""
    capabilities: list[str] = field(default_factory=list)
    """The capabilities the run's spec grants (sorted): what an agent's session is offered
    (the gate still checks each call's grant, scope and uses)."""
    parent_run_id: str | None = None
    """The run whose ``delegate`` call started this one (a sub-run); ``None``: a producer's."""
    children: list[dict[str, Any]] = field(default_factory=list)
    """The sub-runs it started, oldest first (``run_id``, ``status``, ``stop_reason``,
    ``route``); filled by ``get_run`` (``run show``), empty in lists."""
    budget_stop: dict[str, Any] | None = None
    """For a run stopped by a budget (``MAX_*_REACHED``, ``DEADLINE_REACHED``): what was
    already made (``artifacts``: each succeeded effect's ``command_id``, ``tool``, ``step``,
    output ``ids`` and ``fields``) and the ``budget`` snapshot when it stopped."""
    kind: str = "live"
    """``live`` (a producer's or a delegation's run), ``replay`` or ``fork``."""
    source_run_id: str | None = None
    """The run a replay or a fork came from."""
    source_step: int | None = None
    """The step of its source a fork started at (its record before it carried)."""

    @classmethod
    def of(
        cls,
        run: Run,
        *,
        confirmation_request: dict[str, Any] | None = None,
        pre_approvals: list[dict[str, Any]] | None = None,
        children: list[dict[str, Any]] | None = None,
    ) -> RunInfo:
        return cls(
            run_id=run.id,
            status=run.status,
            phase=run.phase,
            stop_reason=run.stop_reason,
            step=run.step,
            model_calls=run.model_calls,
            tool_calls=run.tool_calls,
            version=run.version,
            answer=run.answer,
            goal=run.goal,
            subject=run.subject,
            created_at=run.created_at.isoformat(),
            finished_at=run.finished_at.isoformat() if run.finished_at else None,
            confirmation_request=request_as_shown(confirmation_request),
            pre_approvals=pre_approvals or [],
            idempotency_key=run.idempotency_key,
            started_by=run.started_by,
            trace_id=run.trace_id,
            tokens_used=run.tokens_used or 0,
            cost_used=round(run.cost_used or 0.0, 6),
            waiting_for_grant=(
                dict(run.stop_detail or {}) if run.status == RunStatus.WAITING_GRANT.value else None
            ),
            capabilities=granted_capabilities(run.spec),
            parent_run_id=run.parent_run_id,
            children=children or [],
            budget_stop=(dict(run.stop_detail or {}) if run.stop_reason in BUDGET_STOPS else None),
            kind=run.kind or "live",
            source_run_id=run.source_run_id,
            source_step=run.source_step,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
