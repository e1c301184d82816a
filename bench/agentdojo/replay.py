"""One replay: a scripted planner's calls, each through warrant's real gate
(``warrant.runner.policy.evaluate``, a pure function: no broker, no database), the accepted ones
run in AgentDojo's own :class:`~agentdojo.functions_runtime.FunctionsRuntime` on the task's
environment.

Each proposal gets the :class:`~warrant.runner.gate.GateInput` the policy stage would build:
the run (step, tool calls, observation version), every tool of the suite granted by name
(``resource_scope`` ``*``), the person's confirmations so far, the loop history, the suite's
registry and, for a write or an egress read, the provenance sources
(``sources_from(goal, spec, observations, attributions=...)``): the goal, the spec (``goal``
and ``subject``) and every observation so far, each tool result with its contract's
``output_source`` and every refusal a ``policy`` observation (which vouches for nothing).

A call that needs a confirmation goes to the configured person (:data:`PERSONS`); an approved
one is evaluated again with the approval bound to its proposal hash, a declined one is
refused ``CONFIRMATION_DECLINED`` by the gate itself. A refused call does not run; the planner
goes on with its next call. A halt (a loop the gate detects) ends the replay.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime, TaskEnvironment

from bench.agentdojo.contracts import shape_output
from warrant.runner.codes import ObservationSource, Phase, RunStatus
from warrant.runner.gate import Accept, AwaitConfirmation, Decision, GateInput, Halt, Reject
from warrant.runner.policy import evaluate
from warrant.runner.provenance import flag_reason, sources_from
from warrant.runner.spec import Budgets
from warrant.runner.views import ConfirmationView, GrantView, HistoryEntry, RunView
from warrant.tools import SideEffect, Tool
from warrant.tools._registry import Registry

__all__ = ["CONFIGS", "PERSONS", "CallRecord", "Config", "Gate", "Run", "Timing"]

RUN_ID = "run-agentdojo"
#: Who answers a confirmation request: ``approves-all`` approves everything (a tired
#: approver); ``declines-flagged`` declines a request whose provenance flags an argument
#: (``request["provenance"]["flagged"]``) and approves the rest.
PERSONS = ("approves-all", "declines-flagged")
#: Wide enough that no replay meets a budget: the bench measures provenance, not budgets.
BUDGETS = Budgets(max_steps=1_000, max_model_calls=1_000, max_tool_calls=1_000)
DECLINED = "CONFIRMATION_DECLINED"


@dataclass(frozen=True)
class Config:
    """One row of the table: the gate or none, who approves, what the contracts do with
    untrusted destinations and copied content."""

    key: str
    label: str
    gated: bool = True
    person: str = "approves-all"
    ask_destinations: bool = False
    ask_copied: bool = False


CONFIGS = (
    Config("undefended", "undefended: every call runs", gated=False),
    Config("approve-all", "tool-name grants, default rules, approves everything"),
    Config(
        "decline-flagged",
        "tool-name grants, default rules, declines flagged requests",
        person="declines-flagged",
    ),
    Config(
        "ask-copied",
        "tool-name grants, copied content asked, approves everything",
        ask_copied=True,
    ),
    Config(
        "ask-destinations",
        "tool-name grants, destinations asked, approves everything",
        ask_destinations=True,
    ),
)


@dataclass
class CallRecord:
    """One proposed call and its fate."""

    tool: str
    arguments: dict[str, Any]
    injected: bool
    fate: str = "pending"
    """``ran`` (the gate accepted it, or no gate), ``refused``, ``declined`` or ``stopped``."""
    code: str | None = None
    """The refusal code (``declined``: ``CONFIRMATION_DECLINED``) or the halt's reason."""
    reason: str | None = None
    """The gate's message (which argument, and where its value came from)."""
    asked: bool = False
    """Did it wait for a person's confirmation?"""
    flagged: list[str] = field(default_factory=list)
    """The request's provenance flags: ``argument: where its value came from``."""
    origins: dict[str, str] = field(default_factory=dict)
    """Each argument's origin (trusted, untrusted, unseen, vouched, author, unchecked)."""
    error: str | None = None
    """AgentDojo's error when the call ran and failed."""
    carried_injection: bool = False
    """Its output carried the injected text."""


@dataclass(frozen=True)
class Timing:
    """The gate's time on one write or egress proposal: ``sources_from`` and ``evaluate``,
    what the policy stage computes per proposal (the database aside)."""

    ms: float
    observations: int
    kb: float
    tool: str


@dataclass(frozen=True)
class Gate:
    """What every replay of one suite and configuration shares."""

    registry: Registry
    person: str
    subject: str
    grants: tuple[GrantView, ...]

    @classmethod
    def of(cls, tools: Sequence[Tool[Any, Any]], *, person: str, subject: str) -> Gate:
        """Every tool granted by name: a grant per capability, any resource."""
        grants = tuple(
            GrantView(
                grant_id=i,
                run_id=RUN_ID,
                capability=cap,
                resource_scope="*",
                expires_at_step=None,
                max_uses=None,
                uses=0,
            )
            for i, cap in enumerate(sorted({c for t in tools for c in t.capabilities}), 1)
        )
        return cls(Registry(tools), person, subject, grants)


class Run:
    """One replay on one environment: propose calls with :meth:`propose`."""

    def __init__(
        self,
        *,
        goal: str,
        env: TaskEnvironment,
        runtime: FunctionsRuntime,
        gate: Gate | None,
        marker: str = "",
        sources: Mapping[str, ObservationSource] | None = None,
    ) -> None:
        self.goal, self.env, self.runtime, self.gate, self.marker = goal, env, runtime, gate, marker
        self.sources = dict(sources or {})
        # the replayed agent reads only the task and its tool outputs, as warrant's own planners
        self.spec = {
            "goal": goal,
            "subject": gate.subject if gate else "",
            "planner": {"kind": "openai"},
        }
        self.observations: list[list[Any]] = [["user-1", "user", {"goal": goal}]]
        self.bytes = len(json.dumps(self.observations))
        self.history: list[HistoryEntry] = []
        self.confirmations: list[ConfirmationView] = []
        self.trace: list[FunctionCall] = []
        self.outputs: list[str] = []
        self.timings: list[Timing] = []
        self.step = self.tool_calls = self.requests = 0
        self.observation_version = 1
        self.by_tool: dict[str, int] = {}
        self.stopped: str | None = None
        self.now = time.time()

    # --- the planner's side ----------------------------------------------------------------

    def propose(self, call: FunctionCall, *, injected: bool) -> CallRecord:
        """Propose one call; it runs if the gate (or its absence) lets it."""
        record = CallRecord(call.function, dict(call.args), injected)
        if self.stopped is not None:
            record.fate, record.code = "stopped", self.stopped
            return record
        if self.gate is None:
            self._execute(record, dict(call.args))
            return record
        self.step += 1
        raw = {
            "kind": "tool",
            "proposal_id": f"p{self.step}",
            "tool": call.function,
            "tool_version": "1",
            "arguments": dict(call.args),
            "reason_summary": "",
            "source_observation_ids": [],
        }
        decision = self._evaluate(raw)
        self.history.append(
            HistoryEntry(
                fingerprint=_fingerprint(decision), observation_version=self.observation_version
            )
        )
        if isinstance(decision, AwaitConfirmation):
            decision = self._ask(record, decision, raw)
        self._settle(record, decision)
        return record

    # --- the gate ------------------------------------------------------------------------

    def _evaluate(self, raw: dict[str, Any]) -> Decision:
        assert self.gate is not None
        tool = self.gate.registry.get(raw["tool"], raw["tool_version"])
        if tool is None or (tool.side_effect is SideEffect.READ and not tool.egress):
            return evaluate(self._input(raw, None))  # the stage loads no sources for a read
        start = time.perf_counter()
        registry = self.gate.registry
        derived = {  # what this version of warrant reads (an older gate lacks some)
            name: getattr(registry, name)()
            for name in ("listings", "privates")
            if name in inspect.signature(sources_from).parameters
        }
        sources = sources_from(
            self.goal,
            self.spec,
            self.observations,
            attributions=registry.attributions(),
            **derived,
        )
        decision = evaluate(self._input(raw, sources))
        ms = (time.perf_counter() - start) * 1000
        self.timings.append(Timing(ms, len(self.observations), self.bytes / 1024, tool.name))
        return decision

    def _input(self, raw: dict[str, Any], sources: Any) -> GateInput:
        assert self.gate is not None
        run = RunView(
            run_id=RUN_ID,
            status=RunStatus.RUNNING,
            phase=Phase.POLICY,
            version=self.step,
            step=self.step,
            model_calls=self.step,
            tool_calls=self.tool_calls,
            observation_version=self.observation_version,
            deadline_at=self.now + 3600,
            subject=self.gate.subject,
            budgets=BUDGETS,
            tool_calls_by_tool=dict(self.by_tool),
        )
        return GateInput(
            raw=raw,
            run=run,
            expected_version=self.step,
            grants=self.gate.grants,
            confirmations=list(self.confirmations),
            history=list(self.history),
            registry=self.gate.registry,
            now=self.now,
            provenance=sources,
        )

    def _ask(self, record: CallRecord, asked: AwaitConfirmation, raw: dict[str, Any]) -> Decision:
        """The person decides; the gate judges the same proposal again with the decision."""
        assert self.gate is not None
        self.requests += 1
        record.asked = True
        provenance = asked.request().get("provenance") or {}
        flags = provenance.get("flagged") or []
        record.flagged = [f"{f['argument']} ({f['what']}): {flag_reason(f)}" for f in flags]
        approved = self.gate.person == "approves-all" or not flags
        decision = ConfirmationView(
            confirmation_id=f"c{self.step}",
            run_id=RUN_ID,
            proposal_hash=asked.proposal_hash,
            tool=asked.tool.name,
            approved=approved,
            used=False,
            expires_at_step=self.step + 1,
            expires_at=self.now + 600,
        )
        self.confirmations.append(decision)
        again = self._evaluate(raw)
        self.confirmations.remove(decision)  # used (approved) or answered (declined)
        return again

    def _settle(self, record: CallRecord, decision: Decision) -> None:
        if isinstance(decision, Accept):
            provenance = decision.provenance or {}
            origins = provenance.get("origins") or {}
            record.origins = {path: o.get("origin", "?") for path, o in origins.items()}
            self._execute(record, decision.arguments)
        elif isinstance(decision, Reject):
            record.fate = "declined" if decision.code == DECLINED else "refused"
            record.code, record.reason = decision.code, decision.message
            content = {"code": decision.code, "layer": decision.layer, "tool": record.tool}
            self._observe(f"policy-{self.step}", ObservationSource.POLICY.value, content)
        elif isinstance(decision, Halt):
            record.fate, record.code = "stopped", decision.reason.value
            self.stopped = decision.reason.value
        else:
            raise RuntimeError(f"the gate answered {type(decision).__name__} for {record.tool}")

    # --- AgentDojo's side ------------------------------------------------------------------

    def _execute(self, record: CallRecord, arguments: dict[str, Any]) -> None:
        result, error = self.runtime.run_function(self.env, record.tool, arguments)
        self.trace.append(FunctionCall(function=record.tool, args=arguments))
        self.tool_calls += 1
        self.by_tool[record.tool] = self.by_tool.get(record.tool, 0) + 1
        content: dict[str, Any] = {"tool": record.tool, "status": "succeeded"}
        if error is None:
            content["output"] = shape_output(record.tool, arguments, result)
            self.outputs.append(tool_result_to_str(result))
        else:
            content |= {"status": "failed", "code": "TOOL_ERROR", "message": error}
            self.outputs.append(error)
        source = self.sources.get(record.tool, ObservationSource.UNTRUSTED_CONTENT)
        text = self._observe(f"tool-{self.tool_calls}", source.value, content)
        self.observation_version += 1
        record.fate, record.error = "ran", error
        record.carried_injection = bool(self.marker) and self.marker in text

    def _observe(self, observation_id: str, source: str, content: dict[str, Any]) -> str:
        observation = [observation_id, source, content]
        text = json.dumps(observation, ensure_ascii=False, default=str)
        self.observations.append(observation)
        self.bytes += len(text.encode())
        return text


def _fingerprint(decision: Decision) -> str:
    """The proposal's fingerprint for loop detection (its hash once its arguments are valid)."""
    for name in ("proposal_hash", "fingerprint"):
        value = getattr(decision, name, None)
        if isinstance(value, str):
            return value
    return "unparsed"
