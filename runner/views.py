"""Read-only views of authoritative run state, as the pure core sees it.

The ledger loads these; the core decides; the shell writes the decision back with a
compare-and-set on ``version``. Nothing here touches a database or a broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from warrant.runner.codes import ObservationKind, Phase, RunStatus
from warrant.runner.scopes import legacy_covers
from warrant.runner.spec import Budgets, GrantConstraints

__all__ = [
    "ConfirmationView",
    "EffectView",
    "GrantView",
    "HistoryEntry",
    "ObservationView",
    "PreApprovalView",
    "ProvenanceSources",
    "RunView",
    "request_as_shown",
]


@dataclass(frozen=True, kw_only=True)
class RunView:
    run_id: str
    status: RunStatus
    phase: Phase
    version: int
    step: int
    model_calls: int
    tool_calls: int
    observation_version: int
    deadline_at: float
    subject: str
    budgets: Budgets
    tool_calls_by_tool: dict[str, int] = field(default_factory=dict)
    tokens_used: int = 0
    cost_used: float = 0.0
    model_calls_delegated: int = 0
    """Of ``model_calls``, those its sub-runs hold: the run's own are the rest."""

    def remaining_s(self, now: float) -> float:
        return self.deadline_at - now

    def budget_snapshot(self) -> dict[str, Any]:
        b = self.budgets
        return {
            "step": self.step,
            "max_steps": b.max_steps,
            "model_calls": self.model_calls,
            "max_model_calls": b.max_model_calls,
            "tool_calls": self.tool_calls,
            "max_tool_calls": b.max_tool_calls,
            "tokens": self.tokens_used,
            "max_tokens": b.max_tokens,
            "cost": round(self.cost_used, 6),
            "max_cost": b.max_cost,
            "deadline_at": self.deadline_at,
        }


@dataclass(frozen=True, kw_only=True)
class ObservationView:
    observation_id: str
    kind: ObservationKind
    step: int
    succeeded: bool = False
    """For tool results: the tool succeeded (only those are citable evidence)."""
    final: bool = True
    """False for a long-running tool's acceptance (its job has not ended: not evidence)."""

    @staticmethod
    def flags(status: str | None) -> dict[str, bool]:
        """``succeeded`` and ``final`` of a tool result whose content says ``status``."""
        return {"succeeded": status == "succeeded", "final": status != "accepted"}


@dataclass(frozen=True, kw_only=True)
class GrantView:
    grant_id: int
    run_id: str
    capability: str
    resource_scope: str
    expires_at_step: int | None
    max_uses: int | None
    uses: int
    destinations_from: tuple[str, ...] = ()
    """A task-scoped grant's sources (``Grant.destinations_from``); empty: not narrowed."""
    expires_at: float | None = None
    """Wall-clock expiry, epoch seconds on the database's clock; ``None``: none."""
    constraints: GrantConstraints | None = None
    """Limits on the call's argument values (``Grant.constraints``); ``None``: none."""

    def live(self, *, step: int, now: float) -> bool:
        """Not past its last step nor its expiry; ``now`` is the database's time (the policy
        stage's clock), never a host's own."""
        if self.expires_at_step is not None and self.expires_at_step < step:
            return False
        return self.expires_at is None or now < self.expires_at

    def covers(self, resource: str) -> bool:
        return legacy_covers(self.resource_scope, resource)


@dataclass(frozen=True, kw_only=True)
class ConfirmationView:
    confirmation_id: str
    run_id: str
    proposal_hash: str
    tool: str
    approved: bool
    used: bool
    expires_at_step: int
    expires_at: float
    covers_run: bool = False
    """A ``per-run`` approval: once used, it covers the tool's later calls in the run."""


@dataclass(frozen=True, kw_only=True)
class HistoryEntry:
    """An earlier tool proposal of the run, for loop detection."""

    fingerprint: str
    observation_version: int


#: The statuses of an earlier call that block a call with its effect key: in flight (issued,
#: started), succeeded, or an effect nobody can vouch for (unknown, unless found not applied;
#: a job the service accepted, unless it failed).
_IN_FLIGHT = frozenset({"issued", "started"})


@dataclass(frozen=True, kw_only=True)
class EffectView:
    """An earlier command with a business effect key (``commands.effect_key``), in this run
    or, within a tool's window, another: what the gate's effect layer compares a call with."""

    key: str
    run_id: str
    step: int
    branch: int = 0
    command_id: str | None = None
    """None: a call of the same parallel step, not yet issued."""
    status: str
    """``issued`` or ``started`` (in flight), ``discarded``, or its latest outcome's status
    (``succeeded``, ``failed``, ``rejected``, ``unknown``, ``accepted``)."""
    resolved: str | None = None
    """What the reconciler (or a job's poll) found: ``applied``, ``not_applied``, ..."""
    age_s: float = 0.0
    """Seconds since the command was issued, by the database's clock."""
    observation_id: str | None = None
    """The observation its result became (in its run), once it has an outcome."""

    @property
    def blocks(self) -> bool:
        """Does this earlier call make another with its key a duplicate?"""
        if self.status in _IN_FLIGHT or self.status == "succeeded":
            return True
        if self.status == "unknown":
            return self.resolved != "not_applied"
        if self.status == "accepted":
            return self.resolved != "failed"
        return False

    def shown(self, *, run_id: str) -> dict[str, Any]:
        """The earlier outcome as a refusal carries it (no argument values)."""
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "same_run": self.run_id == run_id,
            "step": self.step,
            "branch": self.branch,
            "command_id": self.command_id,
            "status": self.status,
        }
        if self.resolved is not None:
            out["resolved"] = self.resolved
        if self.observation_id is not None:
            out["observation_id"] = self.observation_id
        return out


@dataclass(frozen=True, kw_only=True)
class PreApprovalView:
    """One exact proposal approved ahead of time (by its hash), usable once."""

    pre_approval_id: int
    proposal_hash: str
    tool: str
    approved_by: str
    used: bool


@dataclass(frozen=True, kw_only=True)
class ProvenanceSources:
    """Where argument values may come from: what the user and trusted tools said (the goal,
    the spec, trusted observations), and the untrusted observations, by id."""

    trusted: tuple[str, ...]
    untrusted: tuple[tuple[str, str], ...]
    """``(observation_id, text)`` pairs."""
    task: tuple[tuple[str, str], ...] = ()
    """``(source, text)`` pairs a task-scoped grant may name (``Grant.destinations_from``):
    ``goal``, ``spec`` (the spec's text, planner section excluded), ``answers`` (a person's
    answers), ``observations:<tool>`` (outputs of that tool, only if its contract declared
    them trusted), ``named`` (items of untrusted outputs whose author the user named),
    ``authors`` (those items' authors, as the service reports them), ``listed`` (the user's
    own resources a listing named)."""
    items: tuple[tuple[str, str, str, str | None], ...] = ()
    """Attributed items of untrusted observations (:mod:`warrant.runner.provenance`):
    ``(item_id, author, text, named_as)``; ``named_as`` is the user's word naming the author
    (a vouched source), or None."""
    authors: tuple[tuple[str, str, str], ...] = ()
    """``(item_id, author, kind)``: the items' authors a reply may go to, as destinations of
    that :class:`~warrant.runner.scopes.ResourceKind` only (``Attribution.replies``)."""
    user: tuple[str, ...] = ()
    """The user's own words: the goal and a person's answers (never the spec's settings)."""
    private: tuple[tuple[str, str, str], ...] = ()
    """``(observation_id, field, value)``: the user's private data tools returned
    (``Tool.private``)."""
    listed: tuple[tuple[str, str, str], ...] = ()
    """``(observation_id, kind, value)``: the user's own resources the service listed
    (``Tool.listing``)."""
    documents: frozenset[str] = frozenset()
    """The ids of the items that vouch for no destination when named
    (``Attribution(destinations=False)``: a bill or a letter the user points at)."""
    whole_context: bool = True
    """The gate read everything the planner read: a planner inside warrant (every kind but
    ``external``) sees only the run's memory view, so a link or address it wrote that nothing
    the run read holds came from nowhere the user vouches for (refused as a destination). An
    agent that runs its own loop read things the run never saw: such a link is asked about."""


def request_as_shown(request: dict[str, Any] | None) -> dict[str, Any] | None:
    """A confirmation request as people and programs see it (the API, the CLI, webhooks):
    ``expires_at`` as an ISO 8601 string like every other time; the ledger keeps the epoch
    seconds the gate compares."""
    if not request or not isinstance(request.get("expires_at"), int | float):
        return request
    at = datetime.fromtimestamp(float(request["expires_at"]), tz=UTC).isoformat()
    return {**request, "expires_at": at}
