"""Parallel steps, as pure decisions: several independent calls in one step, and the rule that
merges them (fan-out, fan-in).

A planner's ``kind: parallel`` output (:class:`~warrant.runner.spec.ParallelProposal`) carries
up to ``policy.max_parallel_calls`` calls. The policy stage puts each through the whole gate
on its own (:func:`warrant.runner.policy.evaluate`), then :func:`check_set` decides for the set:
a set whose accepted calls do not all fit the run's remaining tool calls is refused whole,
before any of it runs. The accepted calls become one command each (their own idempotency token,
lease and outcome), issued together; :class:`FanOut` is what the run keeps of the open step
(``runs.fan_out``).

Each branch's outcome is recorded by the tool stage; :func:`verdict` says after each one
whether the step's merge rule holds (``all``, ``any``, ``at_least: k``), can no longer hold,
or needs more. Once decided, the branches still in flight are cut (the same interruption a
cancel uses), and the planner sees one observation per branch (its own source, so provenance
keeps each branch's identity) and the step's (:func:`merged`): ``complete`` (every branch
succeeded), ``partial`` (the rule holds, some did not: degraded, and said so) or ``invalid``
(the rule cannot hold: no verdict; the branches' results are then not citable by a final
answer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from warrant.runner import delegation
from warrant.runner.canonical import echoed_name
from warrant.runner.codes import Outcome, Rejection
from warrant.runner.gate import Accept, AwaitConfirmation, Decision, Event, GateInput, Reject
from warrant.runner.policy import evaluate
from warrant.runner.spec import AtLeast, ParallelProposal
from warrant.runner.views import EffectView, RunView
from warrant.tools._contract import SideEffect
from warrant.tools._registry import Registry

__all__ = [
    "BranchPlan",
    "BranchState",
    "FanOut",
    "SetRefusal",
    "Verdict",
    "check_set",
    "gate_calls",
    "merged",
    "named",
    "parallel_of",
    "planned",
    "required",
    "rule_name",
    "shown",
    "tool_observation_id",
    "unresolved",
    "verdict",
]

State = Literal["open", "complete", "partial", "invalid"]

#: A branch's status in the step's verdict.
PENDING, SUCCEEDED, CANCELLED, REFUSED = "pending", "succeeded", "cancelled", "refused"


def required(parallel: ParallelProposal) -> int:
    """How many of the step's calls must succeed for its merge rule to hold."""
    merge = parallel.merge
    if isinstance(merge, AtLeast):
        return merge.at_least
    return 1 if merge == "any" else len(parallel.calls)


def rule_name(parallel: ParallelProposal) -> str:
    merge = parallel.merge
    return f"at_least:{merge.at_least}" if isinstance(merge, AtLeast) else merge


def parallel_of(proposal: Mapping[str, Any]) -> ParallelProposal | None:
    """A pending proposal row as a parallel step, if it is a well-formed one (a malformed
    one goes through the gate, whose parse layer refuses it)."""
    if proposal.get("kind") != "parallel":
        return None
    try:
        return ParallelProposal.model_validate(proposal.get("raw"))
    except ValidationError:
        return None


def named(call: Any) -> dict[str, Any]:
    """The tool an (untrusted) call names: ``tool`` and ``tool_version``, as given."""
    fields = call if isinstance(call, dict) else {}
    return {"tool": fields.get("tool"), "tool_version": fields.get("tool_version")}


@dataclass(frozen=True)
class BranchPlan:
    """One call of the step as the gate left it: its command, or the code it was refused with."""

    branch: int
    proposal_id: str | None
    tool: str | None
    command_id: str | None = None
    refused: str | None = None
    write: bool = False
    """Its tool writes: the merge waits for its outcome instead of cutting it (an interrupted
    write's effect would be unknown). Not for a job its contract can cancel (a sub-run): it
    is cut by its cancel, and its poll still reports how it ended."""

    @classmethod
    def of(cls, number: int, call: Any, decision: Decision, command: Any) -> BranchPlan:
        """Call ``number`` and its gate ``decision``: its ``command`` (if accepted) or the
        refusal's code."""
        fields = call if isinstance(call, dict) else {}
        pid, tool = fields.get("proposal_id"), fields.get("tool")
        plan = cls(  # a refused call's tool is the planner's name: echoed within a bound
            number,
            pid if isinstance(pid, str) else None,
            echoed_name(tool) if isinstance(tool, str) else None,
        )
        if command is not None:
            assert isinstance(decision, Accept)
            tool = decision.tool  # a job its contract can cancel (a sub-run) is cut like a read:
            cancellable = tool.job is not None and tool.job.cancel is not None  # its poll says
            write = tool.side_effect is not SideEffect.READ and not cancellable  # how it ended
            return dataclasses.replace(plan, command_id=command.id, tool=command.tool, write=write)
        assert isinstance(decision, Reject)
        return dataclasses.replace(plan, refused=decision.code)


@dataclass(frozen=True)
class FanOut:
    """The open parallel step, kept on the run (``runs.fan_out``) until its verdict."""

    step: int
    proposal_id: str
    rule: str
    require: int
    cancel_when_met: bool
    deadline_at: float | None
    branches: tuple[BranchPlan, ...]

    @classmethod
    def of(
        cls,
        parallel: ParallelProposal,
        *,
        step: int,
        deadline_at: float | None,
        plans: Sequence[BranchPlan],
    ) -> FanOut:
        return cls(
            step=step,
            proposal_id=parallel.proposal_id,
            rule=rule_name(parallel),
            require=required(parallel),
            cancel_when_met=parallel.cancel_when_met,
            deadline_at=deadline_at,
            branches=tuple(plans),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FanOut:
        branches = tuple(BranchPlan(**b) for b in data["branches"])
        return cls(**{**dict(data), "branches": branches})

    def branch_of(self, command_id: str) -> BranchPlan | None:
        return next((b for b in self.branches if b.command_id == command_id), None)

    def holds(self, step: int, command_id: str) -> bool:
        """Is the command (of ``step``) one of this open step's calls?"""
        return self.step == step and self.branch_of(command_id) is not None

    @property
    def command_ids(self) -> list[str]:
        return [b.command_id for b in self.branches if b.command_id is not None]


@dataclass(frozen=True)
class BranchState:
    """What became of one branch, from the ledger: its command's status and its outcome."""

    plan: BranchPlan
    status: str
    """``pending`` (issued or running), ``succeeded``, ``failed``, ``rejected``, ``unknown``,
    ``cancelled`` (cut, or ended at the branch deadline) or ``refused`` (by the gate)."""
    code: str | None = None
    source: str | None = None
    cut: str | None = None
    """Why it was cancelled: ``branch_deadline``, ``rule_met``, ``rule_cannot_hold``, ``run``."""


def branch_state(
    plan: BranchPlan,
    *,
    command_status: str | None,
    outcome: str | None,
    code: str | None,
    source: str | None,
    cut: bool,
    at_branch_deadline: bool,
) -> BranchState:
    """A branch's status from its command's and its last outcome's columns."""
    if plan.refused is not None:
        return BranchState(plan, REFUSED, plan.refused, source)
    if outcome is None:
        if command_status in ("issued", "started") and not cut:
            return BranchState(plan, PENDING, None, source)
        return BranchState(plan, CANCELLED, code, source, "rule_met" if cut else "run")
    if outcome == Outcome.FAILED.value and code in ("TOOL_TIMEOUT", "CANCELLED_DURING_EXECUTION"):
        if at_branch_deadline:
            return BranchState(plan, CANCELLED, code, source, "branch_deadline")
        if cut:
            return BranchState(plan, CANCELLED, code, source, "rule_met")
    return BranchState(plan, outcome, code, source)


@dataclass(frozen=True)
class Verdict:
    state: State
    succeeded: int
    total: int
    cut: tuple[str, ...] = ()
    """The commands still in flight to cut now."""
    missing: tuple[int, ...] = ()
    """The branches that did not succeed (a partial or invalid step names them)."""

    @property
    def decided(self) -> bool:
        return self.state != "open"


def verdict(
    fan: FanOut, branches: Sequence[BranchState], *, wait_for_writes: bool = True
) -> Verdict:
    """Does the step's rule hold (``complete``/``partial``), can it no longer hold
    (``invalid``), or does it need branches still in flight (``open``)? A decided step cuts
    the reads still in flight (a step that holds waits for them only when
    ``cancel_when_met`` is off: they end by the branch deadline); a write in flight is never
    cut, the step waits for its outcome (``wait_for_writes``; off for a step none of whose
    calls has started)."""
    total = len(branches)
    ok = sum(b.status == SUCCEEDED for b in branches)
    pending = [b for b in branches if b.status == PENDING]
    missing = tuple(b.plan.branch for b in branches if b.status != SUCCEEDED)
    cut = tuple(b.plan.command_id for b in pending if b.plan.command_id is not None)
    writing = wait_for_writes and any(b.plan.write for b in pending)
    if ok + len(pending) < fan.require and not writing:
        return Verdict("invalid", ok, total, cut, missing)
    met = ok >= fan.require and (not pending or fan.cancel_when_met)
    if met and not writing:
        return Verdict("complete" if ok == total else "partial", ok, total, cut, missing)
    return Verdict("open", ok, total)


def merged(
    fan: FanOut,
    branches: Sequence[BranchState],
    decided: Verdict,
    *,
    digests: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """The step's observation (and its ``step.merged`` event): the verdict in the words of
    the design (``complete: 3/3``, ``partial: 2/3``, ``invalid``), and each branch with its
    tool, source, status, outcome code and (``digests``) its output's digest. Nothing in it
    names the step: the same calls with the same results make the same observation, which
    is then not new (loop detection sees a repeated set as it sees a repeated call)."""
    said = {
        "complete": f"complete: {decided.succeeded}/{decided.total} succeeded",
        "partial": f"partial: {decided.succeeded}/{decided.total} succeeded, degraded output",
        "invalid": "invalid: the merge rule cannot hold, no verdict",
    }[decided.state]
    listed = []
    for b in branches:
        entry: dict[str, Any] = {"branch": b.plan.branch, "tool": b.plan.tool, "status": b.status}
        if b.source:
            entry["source"] = b.source
        if b.code:
            entry["code"] = b.code
        if b.cut:
            entry["cancelled"] = b.cut
        if digests and b.plan.branch in digests:
            entry["output_sha256"] = digests[b.plan.branch]
        listed.append(entry)
    return {
        "verdict": decided.state,
        "summary": said,
        "rule": fan.rule,
        "succeeded": decided.succeeded,
        "total": decided.total,
        "missing": list(decided.missing),
        "branches": listed,
    }


def tool_observation_id(step: int, branch: int | None = 0) -> str:
    """The observation a call's result becomes: ``tool-<step>``, or ``tool-<step>.<branch>``
    for a parallel step's call."""
    return f"tool-{step}.{branch}" if branch else f"tool-{step}"


# -- the set at the gate ------------------------------------------------------------------------


@dataclass(frozen=True)
class SetRefusal:
    """The whole set refused: ``code`` and the numbers that say why."""

    code: Rejection
    detail: dict[str, Any] = field(default_factory=dict)


def check_set(view: RunView, parallel: ParallelProposal, *, max_calls: int) -> SetRefusal | None:
    """The set-level checks, before the per-call gate: more calls than the spec allows, or
    calls that would not all fit the run's remaining tool calls (or a tool's own cap),
    refuse the set whole, before any of it runs (the budget is reserved for the whole set)."""
    calls = parallel.calls
    if len(calls) > max_calls:
        return SetRefusal(
            Rejection.PARALLEL_TOO_MANY_CALLS, {"calls": len(calls), "max": max_calls}
        )
    budgets = view.budgets
    if view.tool_calls + len(calls) > budgets.max_tool_calls:
        detail: dict[str, Any] = {
            "calls": len(calls),
            "tool_calls": view.tool_calls,
            "max_tool_calls": budgets.max_tool_calls,
        }
        return SetRefusal(Rejection.PARALLEL_BUDGET_EXCEEDED, detail)
    named = [c.get("tool") for c in calls if isinstance(c, dict)]
    tools = [t for t in named if isinstance(t, str)]
    for tool in sorted(set(tools)):
        cap = budgets.max_tool_calls_per_tool.get(tool)
        wanted = view.tool_calls_by_tool.get(tool, 0) + tools.count(tool)
        if cap is not None and wanted > cap:
            detail = {"tool": tool, "wanted": wanted, "max": cap}
            return SetRefusal(Rejection.PARALLEL_BUDGET_EXCEEDED, detail)
    return None


def unresolved(states: Sequence[BranchState]) -> BranchState | None:
    """A call of the step whose effect is unknown and not yet reconciled: the step's rule
    waits for it (the run reconciles the step's unknown calls one at a time)."""
    return next((b for b in states if b.status == Outcome.UNKNOWN.value), None)


def planned(fan: FanOut) -> tuple[Verdict, list[BranchState]]:
    """The verdict of a step whose accepted calls have not started, and its branches:
    ``invalid`` when the rule cannot hold with the calls accepted (then none runs)."""
    states = [BranchState(p, REFUSED if p.refused else PENDING, p.refused) for p in fan.branches]
    return verdict(fan, states, wait_for_writes=False), states


def gate_calls(
    base: GateInput,
    calls: Sequence[Any],
    *,
    on_event: Callable[[Event], None] | None = None,
) -> list[tuple[int, Any, Decision]]:
    """Each call of the set through the whole gate (``base`` with the call as its ``raw``),
    in order: what an accepted call uses (a grant use, a confirmation, a pre-approval) is
    used for the calls after it; the same call twice is refused the second time
    (``PARALLEL_DUPLICATE_CALL``), a long-running tool's call always (``PARALLEL_JOB_TOOL``)
    but a sub-run's (``delegate``: the calls after it see what it reserves),
    and a call with the business effect key of an earlier call of the set (accepted or
    waiting for a person) as if that call were in flight (``DUPLICATE_EFFECT``).
    A call that needs a person keeps its ``AwaitConfirmation``: the set waits for a person's
    decision on each such call."""
    inp, seen = base, set()
    decided: list[tuple[int, Any, Decision]] = []
    for number, call in enumerate(calls, start=1):
        decision = evaluate(dataclasses.replace(inp, raw=call), on_event=on_event)
        sub_run = isinstance(decision, Accept | AwaitConfirmation) and (
            decision.tool.name == delegation.DELEGATE_TOOL
        )
        if not sub_run and isinstance(decision, Accept | AwaitConfirmation) and decision.tool.job:
            decision = Reject(  # its job would hold the run (waiting_job) apart from the step
                code=Rejection.PARALLEL_JOB_TOOL.value,
                layer="schema",
                fingerprint=decision.proposal_hash,
                events=decision.events,
                message=f"{decision.tool.name} is a long-running tool: propose it in a step "
                "of its own",
            )
        elif isinstance(decision, Accept) and decision.proposal_hash in seen:
            decision = Reject(
                code=Rejection.PARALLEL_DUPLICATE_CALL.value,
                layer="loops",
                fingerprint=decision.proposal_hash,
                events=decision.events,
            )
        elif isinstance(decision, Accept):
            seen.add(decision.proposal_hash)
            inp = _used(inp, decision)
        if sub_run and isinstance(decision, Accept):
            inp = _reserved(inp, decision)
        if isinstance(decision, Accept | AwaitConfirmation) and decision.effect_key is not None:
            inp = _claimed(inp, decision.effect_key, number)
        decided.append((number, call, decision))
    return decided


def shown(
    decided: Sequence[tuple[int, Any, Decision]],
    registry: Registry,
    requests: Mapping[int, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """The set as a person sees it: each call's tool, arguments (a sensitive or secret one
    masked, as the tool declares; none for a tool the registry lacks) and where it stands
    (``accepted``, ``refused`` with its code, or ``needs_person`` with its own request from
    ``requests``, keyed by call number: its hash, the approvals it needs and who gave them)."""
    calls = []
    for number, call, decision in decided:
        entry: dict[str, Any] = {"branch": number, **named(call)}
        tool = registry.get(str(entry["tool"]), str(entry["tool_version"]))
        given = call.get("arguments") if isinstance(call, dict) else None
        if tool is not None and isinstance(given, dict):
            masked = tool.masked_fields
            entry["arguments"] = {k: "<sensitive>" if k in masked else v for k, v in given.items()}
        if isinstance(decision, AwaitConfirmation):
            entry |= {**requests[number], "status": "needs_person"}
        elif isinstance(decision, Accept):
            entry |= {"status": "accepted", "proposal_hash": decision.proposal_hash}
        elif isinstance(decision, Reject):
            entry |= {"status": "refused", "code": decision.code}
        calls.append(entry)
    return calls


def _claimed(inp: GateInput, key: str, number: int) -> GateInput:
    """``inp`` with call ``number`` of the set holding the business effect ``key``: in flight
    for the calls after it."""
    run = inp.run
    claim = EffectView(key=key, run_id=run.run_id, step=run.step, branch=number, status="issued")
    return dataclasses.replace(inp, effects=[claim, *inp.effects])


def _reserved(inp: GateInput, accepted: Accept) -> GateInput:
    """``inp`` with what an accepted ``delegate`` call will reserve from the run taken (its
    own tool call too): the set's next sub-runs are carved from what is left."""
    request = accepted.tool.input_model.model_validate(accepted.arguments)
    found = delegation.gate_terms(request, inp)
    if isinstance(found, delegation.Refusal):
        return inp
    r, run = found.reserved, inp.run
    by_tool = dict(run.tool_calls_by_tool)
    by_tool[delegation.DELEGATE_TOOL] = by_tool.get(delegation.DELEGATE_TOOL, 0) + 1
    taken = dataclasses.replace(
        run,
        tool_calls=run.tool_calls + 1 + r.tool_calls,
        tool_calls_by_tool=by_tool,
        model_calls=run.model_calls + (r.model_calls or 0),
        model_calls_delegated=run.model_calls_delegated + (r.model_calls or 0),
        tokens_used=run.tokens_used + (r.tokens or 0),
        cost_used=run.cost_used + (r.cost or 0.0),
    )
    uses = {grant_id: n for _index, grant_id, n in r.grant_uses}
    grants = [
        dataclasses.replace(g, uses=g.uses + uses[g.grant_id]) if g.grant_id in uses else g
        for g in inp.grants
    ]
    return dataclasses.replace(inp, run=taken, grants=grants)


def _used(inp: GateInput, accepted: Accept) -> GateInput:
    """``inp`` with what ``accepted`` uses taken."""
    used = set(accepted.grant_ids)
    return dataclasses.replace(
        inp,
        grants=[
            dataclasses.replace(g, uses=g.uses + 1) if g.grant_id in used else g for g in inp.grants
        ],
        confirmations=[
            dataclasses.replace(c, used=True)
            if c.confirmation_id == accepted.confirmation_id
            else c
            for c in inp.confirmations
        ],
        pre_approvals=[
            dataclasses.replace(a, used=True)
            if a.pre_approval_id == accepted.pre_approval_id
            else a
            for a in inp.pre_approvals
        ],
    )
