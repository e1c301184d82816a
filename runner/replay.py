"""Replay: a recorded run's proposals decided again by today's gate (or a candidate policy),
step by step, with the recorded history held fixed; nothing is executed.

A replay answers "what would this policy have decided?" for a run that already happened.
Each recorded tool proposal (each call of a parallel step) goes through the same pure gate
(:func:`warrant.runner.policy.evaluate`) the policy stage runs, with the gate's inputs rebuilt
from the ledger as they stood at that step: the run's budgets used so far, its grants with the
uses of the commands before the step, its loop history, the provenance of the observations
recorded before the step, the business effect keys of its earlier commands and its
pre-approvals. The tools are *dry*: what a step's call returned is the recorded outcome, read
from the ledger, never a service's answer. The planner's outputs are the recorded ones, so
the history after a step whose decision would now differ stays the recorded one: each step is
judged on its own, as a reviewer of a policy change wants.

A replay never asks anyone: a step that needs a person's confirmation now and did not then is
a difference (``confirmation_now_needed``); a ``per-run`` approval a person gave then still
covers the tool's calls after its first use. Refusals that depended on the deployment, on
other runs or on a person at the time keep their recorded decision, marked ``unmodelled``
(:data:`UNMODELLED_CODES`).

The candidate: :class:`PolicyCandidate` (a JSON file: contract changes by tool name, the
deployment settings the gate reads) applied to this process's registry and settings.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from warrant.runner import fan_in
from warrant.runner import policy as gate
from warrant.runner.codes import ErrorCode, Phase, Rejection, RunStatus
from warrant.runner.errors import InvalidRequest, PluginError
from warrant.runner.provenance import SourcesSoFar
from warrant.runner.spec import Budgets
from warrant.runner.views import (
    ConfirmationView,
    EffectView,
    GrantView,
    HistoryEntry,
    PreApprovalView,
    RunView,
)
from warrant.tools._contract import ConfirmationPolicy, FlagAction, SideEffect, Tool
from warrant.tools._registry import Registry

__all__ = [
    "CHANGES",
    "UNMODELLED_CODES",
    "ContractChange",
    "PolicyCandidate",
    "RecordedCommand",
    "RecordedProposal",
    "RecordedRun",
    "ReplayPolicy",
    "ReplayReport",
    "StepReplay",
    "UntrustedChange",
    "diff_summary",
    "replay_run",
    "replay_runs",
]

log = logging.getLogger("warrant.replay")

#: The kinds of difference a step can show (``StepReplay.change``).
CHANGES = (
    "refused_now",
    "accepted_now",
    "code_changed",
    "confirmation_now_needed",
    "confirmation_no_longer_needed",
    "halted_now",
    "no_longer_halted",
    "provenance_flagged_now",
)

#: Recorded refusals a replay cannot judge again: they depended on the deployment at the time
#: (live workers, an MCP server's served definition, the kill switch then), on other runs (an
#: effect key in another run's window), or on a person (a declined confirmation). A step
#: refused so keeps its recorded decision.
UNMODELLED_CODES = frozenset(
    {
        Rejection.TOOL_NOT_DEPLOYED.value,
        Rejection.MCP_TOOL_CHANGED.value,
        Rejection.CONFIRMATION_DECLINED.value,
        Rejection.DUPLICATE_EFFECT.value,
        "PARALLEL_INVALID",
    }
)


class UntrustedChange(BaseModel):
    """A candidate's change to a tool's provenance rules (``Tool.untrusted``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    destinations: FlagAction | None = None
    copied: FlagAction | None = None
    content: FlagAction | None = None


class ContractChange(BaseModel):
    """A candidate's change to one tool's contract (every version of the tool)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    confirmation: ConfirmationPolicy | None = None
    side_effect: SideEffect | None = None
    capabilities: tuple[str, ...] | None = None
    approvals_required: int | None = None
    self_approval_allowed: bool | None = None
    untrusted: UntrustedChange | None = None


class PolicyCandidate(BaseModel):
    """A policy to review before it is deployed: contract changes by tool name and the
    deployment settings the gate reads (``None``: this process's own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "candidate"
    contracts: dict[str, ContractChange] = {}
    relax_confirmation: tuple[str, ...] | None = None
    observe_tools: tuple[str, ...] | None = None
    disabled_tools: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, candidate: str | bytes | Mapping[str, Any]) -> PolicyCandidate:
        """From JSON text or its parsed object; a bad candidate is ``CANDIDATE_INVALID``."""
        try:
            if isinstance(candidate, str | bytes):
                return cls.model_validate_json(candidate)
            return cls.model_validate(candidate)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "candidate"
            raise InvalidRequest(
                f"the policy candidate is invalid at {where}: {first['msg']}",
                code=ErrorCode.CANDIDATE_INVALID,
            ) from None


@dataclass(frozen=True, kw_only=True)
class ReplayPolicy:
    """What decides in a replay: a registry and the deployment settings the gate reads."""

    registry: Registry
    relaxed: frozenset[str] = frozenset()
    observed: frozenset[str] = frozenset()
    disabled: Mapping[str, str] | None = None
    """Tools switched off (by name, with the reason); ``None``: the ledger's switches now."""
    name: str = "current"

    def with_candidate(self, candidate: PolicyCandidate | None) -> ReplayPolicy:
        """This policy with a candidate's changes (unknown tool names are refused)."""
        if candidate is None:
            return self
        unknown = sorted(set(candidate.contracts) - set(self.registry.names()))
        if unknown:
            raise InvalidRequest(
                f"the policy candidate changes tools this registry lacks: {', '.join(unknown)}",
                code=ErrorCode.CANDIDATE_INVALID,
            )
        try:
            tools = [_changed(t, candidate.contracts.get(t.name)) for t in self.registry]
        except PluginError as exc:
            raise InvalidRequest(
                f"the policy candidate makes an invalid contract: {exc}",
                code=ErrorCode.CANDIDATE_INVALID,
            ) from None
        switched = candidate.disabled_tools
        return ReplayPolicy(
            registry=Registry(tools, plugins=self.registry.plugins),
            relaxed=_given(candidate.relax_confirmation, self.relaxed),
            observed=_given(candidate.observe_tools, self.observed),
            disabled=self.disabled if switched is None else dict.fromkeys(switched, "candidate"),
            name=candidate.name,
        )


def _given(value: tuple[str, ...] | None, default: frozenset[str]) -> frozenset[str]:
    return default if value is None else frozenset(value)


def _changed(tool: Tool[Any, Any], change: ContractChange | None) -> Tool[Any, Any]:
    if change is None:
        return tool
    fields: dict[str, Any] = change.model_dump(exclude_none=True, exclude={"untrusted"})
    if "capabilities" in fields:
        fields["capabilities"] = tuple(fields["capabilities"])
    if change.untrusted is not None:
        rules = change.untrusted.model_dump(exclude_none=True)
        fields["untrusted"] = dataclasses.replace(tool.untrusted, **rules)
    return dataclasses.replace(tool, **fields)


# -- What the ledger recorded (read by :mod:`warrant.ledger.replays`).


@dataclass(frozen=True, kw_only=True)
class RecordedProposal:
    """One gated proposal as recorded: a step's tool proposal, a parallel step's set
    (``kind`` ``parallel``, branch 0) or one of its calls (branch 1..N)."""

    step: int
    branch: int
    kind: str
    proposal_id: str | None
    tool: str | None
    raw: Any
    observation_version: int
    status: str
    code: str | None
    asked: bool
    """A person was asked to confirm it (its ``confirmation_request`` was recorded)."""
    fingerprint: str | None
    proposal_hash: str | None
    decided_at: float
    provenance_flagged: bool = False


@dataclass(frozen=True, kw_only=True)
class RecordedCommand:
    step: int
    branch: int
    command_id: str
    tool: str
    grant_ids: tuple[int, ...]
    effect_key: str | None
    status: str
    """The command's, or its latest outcome's once completed."""
    outcome: str | None
    resolved: str | None = None
    output: Any = None
    confirmation_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class RecordedRun:
    run_id: str
    kind: str
    status: str
    goal: str
    subject: str
    spec: dict[str, Any]
    deadline_at: float
    proposals: tuple[RecordedProposal, ...]
    commands: tuple[RecordedCommand, ...]
    observations: tuple[tuple[str, str, Any, int], ...]
    """``(observation id, source, content, step)``, in the order recorded."""
    grants: tuple[GrantView, ...]
    """With the uses they started with (0, or a fork's carried ones): a step adds the uses of
    the run's commands before it."""
    pre_approvals: tuple[PreApprovalView, ...] = ()
    covering: tuple[ConfirmationView, ...] = ()
    """The ``per-run`` approvals a person gave: once a command used one, it covers the tool's
    later calls (a step after that use sees it; the step that asked for it asks again)."""
    disabled: Mapping[str, str] = field(default_factory=dict)
    """The tools switched off now (the ledger's ``tool_switches``)."""
    source_step: int | None = None
    """A fork's first step of its own: the steps before it are its source's decisions (carried,
    not replayed as the fork's)."""


# -- The report.


@dataclass(frozen=True, kw_only=True)
class StepReplay:
    step: int
    branch: int
    tool: str | None
    proposal_id: str | None
    recorded: dict[str, Any]
    """``decision`` (accepted, refused, halted, asked, other), ``code``, ``asked``."""
    now: dict[str, Any]
    """Today's: ``decision``, ``code``, ``layer``, ``asks`` (a person would be asked) and
    ``provenance_flagged``."""
    change: str | None
    """One of :data:`CHANGES`; ``None``: the same decision."""
    outcome: dict[str, Any] | None
    """The dry tool's answer: the recorded outcome of the step's call, if it ran."""
    unmodelled: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class ReplayReport:
    run_id: str
    policy: str
    steps: tuple[StepReplay, ...]

    @property
    def changed(self) -> tuple[StepReplay, ...]:
        return tuple(s for s in self.steps if s.change is not None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "policy": self.policy,
            "steps": [s.as_dict() for s in self.steps],
            "changed": len(self.changed),
            "executed": 0,
        }


# -- The replay.


def replay_run(recorded: RecordedRun, policy: ReplayPolicy) -> ReplayReport:
    """Every gated proposal of ``recorded`` decided again under ``policy``, in order."""
    steps: list[StepReplay] = []
    before = _Before(recorded, policy)
    calls = {(p.step, p.branch): p for p in recorded.proposals}
    carried = recorded.source_step if recorded.kind == "fork" else None
    for proposal in sorted(recorded.proposals, key=lambda p: p.step):
        if carried is not None and proposal.step < carried:
            continue  # the source decided it: a fork carries the decision, it did not make it
        if proposal.status == "received":
            continue  # never decided (the run ended first): nothing to compare
        if proposal.kind == "parallel" and proposal.branch == 0:
            steps += _replay_set(before, proposal, calls)
        elif proposal.kind == "tool" and proposal.branch == 0:
            inp = before.gate_input(proposal, raw=proposal.raw)
            steps.append(before.compared(proposal, gate.evaluate(inp)))
    return ReplayReport(run_id=recorded.run_id, policy=policy.name, steps=tuple(steps))


def replay_runs(
    recorded: Iterable[RecordedRun], policy: ReplayPolicy
) -> tuple[list[ReplayReport], list[dict[str, str]]]:
    """:func:`replay_run` of each run; a run whose record this version cannot replay (an
    error while rebuilding or deciding a step) is listed with its error instead of ending
    the review (``run_id``, ``error``: the exception's type and message)."""
    reports, failures = [], []
    for run in recorded:
        try:
            reports.append(replay_run(run, policy))
        except Exception as exc:
            log.warning("replay of run %s failed", run.run_id, exc_info=True)
            failures.append({"run_id": run.run_id, "error": f"{type(exc).__name__}: {exc}"[:300]})
    return reports, failures


def _replay_set(
    before: _Before, proposal: RecordedProposal, calls: Mapping[tuple[int, int], RecordedProposal]
) -> list[StepReplay]:
    parallel = fan_in.parallel_of({"kind": "parallel", "raw": proposal.raw})
    if parallel is None:  # refused whole at its parse, then and now
        return []
    base = before.gate_input(proposal, raw=None)
    out = []
    for number, _call, decision in fan_in.gate_calls(base, parallel.calls):
        branch = calls.get((proposal.step, number))
        if branch is not None:
            out.append(before.compared(branch, decision))
    return out


class _Before:
    """What a run had done before a step, carried forward step by step (each recorded command,
    proposal and observation read once, so that a replay is linear in the run's length): the
    gate's inputs as they stood when a proposal was decided."""

    def __init__(self, recorded: RecordedRun, policy: ReplayPolicy) -> None:
        self.recorded, self.policy = recorded, policy
        self.budgets = Budgets.model_validate(recorded.spec.get("budgets") or {})
        self._commands = sorted(recorded.commands, key=lambda c: c.step)
        self._proposals = sorted(recorded.proposals, key=lambda p: p.step)
        self._observations = sorted(recorded.observations, key=lambda o: o[3])
        self._read = {"commands": 0, "proposals": 0, "observations": 0}
        self._outcomes: dict[tuple[int, int], RecordedCommand] = {}
        for c in recorded.commands:
            self._outcomes.setdefault((c.step, c.branch), c)
        self.step = 0
        self.tool_calls = 0
        self.by_tool: Counter[str] = Counter()
        self.uses: Counter[int] = Counter()
        self.confirmations_used: set[str] = set()
        self.effects: list[EffectView] = []  # oldest first
        self.history: dict[int, list[HistoryEntry]] = {}
        self.accepted: set[str] = set()  # the hashes of proposals accepted
        self.sources = SourcesSoFar(
            recorded.goal,
            recorded.spec,
            attributions=policy.registry.attributions(),
            listings=policy.registry.listings(),
            privates=policy.registry.privates(),
        )

    def _advance(self, step: int) -> None:
        """Read what was recorded before ``step`` (steps come in order)."""
        if step <= self.step:
            return
        self.step = step
        commands, read = self._commands, self._read
        while read["commands"] < len(commands) and commands[read["commands"]].step < step:
            c = commands[read["commands"]]
            read["commands"] += 1
            self.tool_calls += 1
            self.by_tool[c.tool] += 1
            self.uses.update(c.grant_ids)
            if c.confirmation_id is not None:
                self.confirmations_used.add(c.confirmation_id)
            if c.effect_key is not None:
                self.effects.append(
                    EffectView(
                        key=c.effect_key,
                        run_id=self.recorded.run_id,
                        step=c.step,
                        branch=c.branch,
                        command_id=c.command_id,
                        status=c.status,
                        resolved=c.resolved,
                    )
                )
        proposals = self._proposals
        while read["proposals"] < len(proposals) and proposals[read["proposals"]].step < step:
            p = proposals[read["proposals"]]
            read["proposals"] += 1
            if p.fingerprint is not None:
                entry = HistoryEntry(
                    fingerprint=p.fingerprint, observation_version=p.observation_version
                )
                self.history.setdefault(p.observation_version, []).append(entry)
            if p.status == "accepted" and p.proposal_hash is not None:
                self.accepted.add(p.proposal_hash)
        observations = self._observations
        while (
            read["observations"] < len(observations)
            and observations[read["observations"]][3] < step
        ):
            oid, source, content, _at = observations[read["observations"]]
            read["observations"] += 1
            self.sources.add(oid, source, content)

    def gate_input(self, proposal: RecordedProposal, *, raw: Any) -> gate.GateInput:
        """The gate's inputs as they stood when ``proposal`` was decided."""
        self._advance(proposal.step)
        recorded, policy = self.recorded, self.policy
        view = RunView(
            run_id=recorded.run_id,
            status=RunStatus.RUNNING,
            phase=Phase.POLICY,
            version=1,
            step=proposal.step,
            model_calls=proposal.step,
            tool_calls=self.tool_calls,
            observation_version=proposal.observation_version,
            deadline_at=recorded.deadline_at,
            subject=recorded.subject,
            budgets=self.budgets,
            tool_calls_by_tool=dict(self.by_tool),
        )
        return gate.GateInput(
            raw=raw,
            run=view,
            expected_version=1,
            grants=[
                dataclasses.replace(g, uses=g.uses + self.uses[g.grant_id]) for g in recorded.grants
            ],
            # a person's ``per-run`` approvals a command before the step used: they cover the
            # tool's later calls (as confirmation_rules.person_decision reads them)
            confirmations=[
                c for c in recorded.covering if c.confirmation_id in self.confirmations_used
            ],
            history=list(self.history.get(proposal.observation_version, ())),
            registry=policy.registry,
            now=proposal.decided_at,
            relaxed=policy.relaxed,
            observed=policy.observed,
            pre_approvals=[
                dataclasses.replace(a, used=a.proposal_hash in self.accepted)
                for a in recorded.pre_approvals
            ],
            # the run's own earlier effect keys, newest first (other runs' are not replayed:
            # a refusal for one is UNMODELLED_CODES)
            effects=self.effects[::-1],
            run_policy=recorded.spec.get("policy") or {},
            disabled=recorded.disabled if policy.disabled is None else policy.disabled,
            provenance=self.sources.sources(),
        )

    def compared(self, p: RecordedProposal, decision: gate.Decision) -> StepReplay:
        then, now = _recorded_decision(p), _now_decision(decision)
        unmodelled = p.code in UNMODELLED_CODES
        change = None if unmodelled else _change(then, now, p.provenance_flagged)
        command = self._outcomes.get((p.step, p.branch))
        outcome = (
            None
            if command is None
            else {
                "command_id": command.command_id,
                "status": command.status,
                "output": command.output,
            }
        )
        return StepReplay(
            step=p.step,
            branch=p.branch,
            tool=p.tool,
            proposal_id=p.proposal_id,
            recorded=then,
            now=now,
            change=change,
            outcome=outcome,
            unmodelled=unmodelled,
        )


#: A proposal row's status as the gate's decision: a refusal that waits for a grant is a
#: refusal (with its code); one waiting for a person was asked about.
_RECORDED_DECISIONS = {
    "accepted": "accepted",
    "rejected": "refused",
    "waiting_grant": "refused",
    "stopped": "halted",
    "waiting_confirmation": "asked",
}


def _recorded_decision(p: RecordedProposal) -> dict[str, Any]:
    decision = _RECORDED_DECISIONS.get(p.status, "asked" if p.asked else p.status)
    return {"decision": decision, "code": p.code, "asked": p.asked or decision == "asked"}


def _now_decision(decision: gate.Decision) -> dict[str, Any]:
    provenance = getattr(decision, "provenance", None) or {}
    flagged = bool(provenance.get("flagged"))
    if isinstance(decision, gate.Accept):
        return {"decision": "accepted", "code": None, "asks": False, "flagged": flagged}
    if isinstance(decision, gate.AwaitConfirmation):
        return {"decision": "asked", "code": None, "asks": True, "flagged": flagged}
    if isinstance(decision, gate.Reject):
        return {
            "decision": "refused",
            "code": decision.code,
            "layer": decision.layer,
            "asks": False,
            "flagged": flagged,
        }
    if isinstance(decision, gate.Halt):
        return {
            "decision": "halted",
            "code": decision.reason.value,
            "asks": False,
            "flagged": False,
        }
    return {"decision": "ignored", "code": decision.reason, "asks": False, "flagged": False}


def _change(then: dict[str, Any], now: dict[str, Any], then_flagged: bool) -> str | None:
    was, was_asked, is_, asks = then["decision"], then["asked"], now["decision"], now["asks"]
    if is_ == "halted" or was == "halted":
        if is_ == was:
            return None if then["code"] in (None, now["code"]) else "code_changed"
        return "halted_now" if is_ == "halted" else "no_longer_halted"
    if asks and not was_asked:
        return "confirmation_now_needed"
    if was_asked and not asks:
        return "confirmation_no_longer_needed" if is_ == "accepted" else "refused_now"
    if is_ == "refused" and was != "refused":
        return "refused_now"
    if was == "refused" and is_ != "refused" and not was_asked:
        return "accepted_now"
    if was == "refused" and is_ == "refused" and then["code"] != now["code"] and not was_asked:
        return "code_changed"
    if now["flagged"] and not then_flagged:
        return "provenance_flagged_now"
    return None


def diff_summary(reports: Sequence[ReplayReport]) -> dict[str, Any]:
    """``policy diff``'s report: the changed decisions by tool and change kind (with the
    recorded and today's codes), each with its run ids and steps."""
    groups: dict[tuple[str, str, str | None, str | None], list[dict[str, Any]]] = {}
    for report in reports:
        for s in report.changed:
            key = (s.tool or "?", s.change or "", s.recorded["code"], s.now["code"])
            groups.setdefault(key, []).append(
                {"run_id": report.run_id, "step": s.step, "branch": s.branch}
            )
    changes: list[dict[str, Any]] = [
        {
            "tool": tool,
            "change": change,
            "recorded_code": then,
            "code": now,
            "count": len(found),
            "runs": sorted({f["run_id"] for f in found}),
            "steps": found,
        }
        for (tool, change, then, now), found in sorted(
            groups.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]), str(kv[0][3]))
        )
    ]
    decided = sum(len(r.steps) for r in reports)
    return {
        "runs": len(reports),
        "decisions": decided,
        "changed": sum(c["count"] for c in changes),
        "runs_changed": len({r for c in changes for r in c["runs"]}),
        "changes": changes,
    }
