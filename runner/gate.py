"""The policy gate's vocabulary: what it is given (:class:`GateInput`), what it records
(:class:`Event`) and what it decides (:data:`Decision`). The layers that decide are in
:mod:`warrant.runner.policy`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from warrant.runner.canonical import echoed_name
from warrant.runner.codes import Rejection, RunStatus, StopReason
from warrant.runner.spec import ToolProposal
from warrant.runner.views import (
    ConfirmationView,
    EffectView,
    GrantView,
    HistoryEntry,
    PreApprovalView,
    ProvenanceSources,
    RunView,
)
from warrant.tools._contract import Tool
from warrant.tools._deployment import WorkerInfo
from warrant.tools._registry import Registry

__all__ = [
    "LAYER_OF_EVENT",
    "MAX_CITED",
    "Accept",
    "AwaitConfirmation",
    "Decision",
    "Event",
    "EventLog",
    "GateInput",
    "Halt",
    "Ignore",
    "Reject",
    "cited_sources",
    "source_observation_ids",
]


@dataclass(frozen=True)
class Event:
    name: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class GateInput:
    raw: Any
    run: RunView
    expected_version: int
    grants: Sequence[GrantView]
    confirmations: Sequence[ConfirmationView]
    history: Sequence[HistoryEntry]
    registry: Registry
    now: float
    deployment: Sequence[WorkerInfo] | None = None
    """The live workers' registrations (from the ledger, read by the stage): a tool the registry
    has but no worker serving its queue has is refused ``TOOL_NOT_DEPLOYED``. ``None``: not
    checked."""
    relaxed: frozenset[str] = frozenset()
    """Tools whose side-effect class the deployment relaxed (``WARRANT_RELAX_CONFIRMATION``)."""
    pre_approvals: Sequence[PreApprovalView] = ()
    """Exact proposals approved ahead of time, each usable once."""
    pins: Mapping[str, str] = field(default_factory=dict)
    """``name@version`` → why that tool's served definition is not the pinned one (an MCP tool
    whose server changed it; read by the stage for the proposal's tool, as plain data)."""
    provenance: ProvenanceSources | None = None
    """Where argument values may come from; loaded for write and egress tools, and for calls
    a task-scoped grant may cover (its sources are in ``task``)."""
    observed: frozenset[str] = frozenset()
    """Tools in observe mode (``WARRANT_OBSERVE_TOOLS``; ``*``: all): :mod:`~.observe`."""
    effects: Sequence[EffectView] = ()
    """Earlier commands with the effect keys of the proposal's calls (this run's, and other
    runs' within the widest window of their tools), newest first; loaded by the stage only
    for tools that declare ``effect_key``."""
    run_policy: Mapping[str, Any] = field(default_factory=dict)
    disabled: Mapping[str, str] = field(default_factory=dict)
    """Tools an operator disabled (``warrant tools disable``), by name, each with its reason:
    read from the ledger by the stage on every decision; their calls are refused
    ``TOOL_DISABLED``."""
    """The run spec's ``policy`` as stored (the delegation layer reads its limits)."""
    policy_approved: bool | None = None
    """Whether an operator approved the policy worker's deployment policy (its hash in
    ``policy_approvals``; ``WARRANT_POLICY_APPROVAL=required``): False refuses every proposal
    ``POLICY_NOT_APPROVED``. ``None``: not checked (the setting is ``off``)."""
    policy_hash: str | None = None
    """The deployment policy's hash the stage checked (named in the refusal's message)."""


@dataclass(frozen=True, kw_only=True)
class Accept:
    proposal: ToolProposal
    tool: Tool[Any, Any]
    arguments: dict[str, Any]
    arguments_hash: str
    proposal_hash: str
    resource: str
    grant_ids: tuple[int, ...]
    confirmation_id: str | None
    events: list[Event]
    pre_approval_id: int | None = None
    """The pre-approval this call uses (marked used in the same commit)."""
    provenance: dict[str, Any] | None = None
    """What the proposal cites and which argument values only untrusted content supplied."""
    effect_key: str | None = None
    """The call's business effect key (``Tool.effect_key`` over the validated arguments),
    written on its command."""
    repeat_of: EffectView | None = None
    """The earlier call with the same key that a person confirmed repeating
    (``repeat_effect``); None when there was none."""


@dataclass(frozen=True, kw_only=True)
class Reject:
    code: str
    layer: str
    fingerprint: str | None
    events: list[Event]
    message: str | None = None
    """Why, for people (the code is the contract)."""
    earlier: dict[str, Any] | None = None
    """``DUPLICATE_EFFECT``: the earlier call with the same effect key (its run, step, branch,
    command, status and observation), as the refusal's observation and decision carry it."""


@dataclass(frozen=True, kw_only=True)
class Halt:
    """The gate stops the run (a budget reached, a loop detected): ``reason`` says which."""

    reason: StopReason
    status: RunStatus
    fingerprint: str | None
    events: list[Event]
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AwaitConfirmation:
    proposal: ToolProposal
    tool: Tool[Any, Any]
    arguments: dict[str, Any]
    proposal_hash: str
    resource: str
    events: list[Event]
    provenance: dict[str, Any] | None = None
    described: dict[str, str] = field(default_factory=dict)
    """What the call's resources refer to, by argument (the tool's ``describe_resources``)."""
    precondition: dict[str, Any] | None = None
    """The state the approver is shown and bound to (``Tool.precondition``: fingerprint and
    summary, or the read's error)."""
    effect_key: str | None = None
    """The call's business effect key (as :attr:`Accept.effect_key`)."""
    repeats: dict[str, Any] | None = None
    """A ``repeat_effect`` call: the earlier call with the same key the person is asked to
    repeat (as :attr:`Reject.earlier`)."""
    per_run: bool = False
    """The call needs a ``per-run`` confirmation: approved once, it covers the tool's later
    calls in the run (the request says ``confirmation: per-run``)."""

    def _flagged(self) -> dict[str, Any]:
        """Where each argument value came from (``origins``: trusted, untrusted with its
        observation, unseen, unchecked) and what is flagged (``code`` when anything is)."""
        assert self.provenance is not None
        shown = {k: v for k, v in self.provenance.items() if k not in ("refused", "allowed")}
        code = Rejection.UNTRUSTED_ARGUMENT.value if self.provenance.get("flagged") else None
        return {**shown, "code": code}

    def request(self) -> dict[str, Any]:
        """What a person is shown: action, target, key parameters, side effect, undo, the
        estimated impact (``Tool.impact``)."""
        shown = {
            k: ("<sensitive>" if k in self.tool.masked_fields else v)
            for k, v in self.arguments.items()
        }
        return {
            "tool": self.tool.name,
            "tool_version": self.tool.version,
            "action": self.tool.description,
            "resource": self.resource,
            "parameters": shown,
            "side_effect": self.tool.side_effect.value,
            "reversible": self.tool.side_effect.value in ("read", "compensatable-write"),
            "estimated_impact": self.tool.estimated_impact(self.arguments),
            **({} if self.tool.verified else {"unverified_reason": self.tool.unverified_reason}),
            "proposal_hash": self.proposal_hash,
            "confirmation": "per-run" if self.per_run else "per-call",
            **({"provenance": self._flagged()} if self.provenance else {}),
            **({"described": dict(self.described)} if self.described else {}),
            **({"precondition": dict(self.precondition)} if self.precondition else {}),
            **({"repeats": dict(self.repeats)} if self.repeats else {}),
        }


@dataclass(frozen=True)
class Ignore:
    """The message is stale for this run state; drop it (the state guard)."""

    reason: str


Decision = Accept | Reject | Halt | AwaitConfirmation | Ignore


class EventLog(list[Event]):
    """The decision's events; each append is also reported to an observer (spans)."""

    def __init__(self, observer: Callable[[Event], None] | None) -> None:
        super().__init__()
        self._observer = observer

    def append(self, event: Event) -> None:
        super().append(event)
        if self._observer is not None:
            self._observer(event)


#: Which gate layer an event closes (for per-layer spans).
LAYER_OF_EVENT = {
    "proposal.parsed": "parse",
    "proposal.registry.checked": "registry",
    "proposal.schema.validated": "schema",
    "proposal.semantic.validated": "semantic",
    "policy.capability.checked": "authorization",
    "policy.provenance.checked": "provenance",
    "policy.state.checked": "state_guard",
    "policy.loop.checked": "loop_detection",
    "policy.effect.checked": "effects",
    "proposal.loop_detected": "loop_detection",
    "proposal.oscillation_detected": "loop_detection",
    "policy.confirmation.relaxed": "confirmation",
    "policy.confirmation.checked": "confirmation",
    "policy.budget.checked": "budget",
}


# -- what a refusal names as its sources (``proposal.rejected``) ---------------------------------

#: Most cited observation ids a trace event names (a proposal may cite up to 100).
MAX_CITED = 100


def cited_sources(raw: Any) -> list[str]:
    """The observation ids a raw planner output cites: a tool call's
    ``source_observation_ids``, a parallel step's calls' together, a final answer's
    ``citations``; each once, as a trace may echo them (untrusted: only strings, at most
    :data:`MAX_CITED`, each cut like any name the planner chose)."""
    if not isinstance(raw, dict):
        return []
    calls = raw.get("calls") if raw.get("kind") == "parallel" else [raw]
    key = "citations" if raw.get("kind") == "final" else "source_observation_ids"
    named: list[Any] = []
    for call in calls[:MAX_CITED] if isinstance(calls, list) else []:
        cited = call.get(key) if isinstance(call, dict) else None
        named += cited[:MAX_CITED] if isinstance(cited, list) else []
    ids = [echoed_name(c) for c in named if isinstance(c, str)]
    return list(dict.fromkeys(ids))[:MAX_CITED]


#: An attributed item's id (``vouching.Item``): ``<observation_id>.<items>[<i>]``.
_ITEM_SUFFIX = re.compile(r"\.[^.\[]+\[\d+\]$")


def source_observation_ids(found: dict[str, Any]) -> list[str]:
    """The observations the argument values of an analysed call came from (an item's id
    named by its observation), in the order the arguments name them, each once."""
    named = [o.get("observation_id") for o in (found.get("origins") or {}).values()]
    for key in ("flagged", "refused", "allowed"):
        named += [f.get("observation_id") for f in found.get(key) or []]
    ids = [_ITEM_SUFFIX.sub("", n) for n in named if isinstance(n, str) and n]
    return list(dict.fromkeys(ids))
