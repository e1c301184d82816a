"""Tool calls of an agent that runs its own loop, through its run's gate: what the MCP gateway
and the framework adapters (:mod:`warrant.contrib`) share.

:meth:`ExternalCalls.call` proposes one call (planner kind ``external``) and waits for its
decision: the gate and the tool within ``decision_wait_s``, a person within
``approval_wait_s``. A call answered "not decided yet" (waiting for a person, or still in the
tool) is remembered by (tool, arguments): the same call made again picks the same proposal
up and returns its outcome, so it is never proposed twice; so is a call that finds its own
proposal still undecided in the ledger (``PROPOSAL_IN_FLIGHT`` with the same tool and
arguments). Blocking: call it from a thread in async code.

Exactly once across a lost answer: each call is proposed under a key (``call_id``: the
framework's tool-call id, the MCP session's request; a fresh one without), which the ledger
keeps with the step: the same key again returns the same decision, never a second command.
A call whose proposal could not be confirmed (the server unreachable, the answer lost past
the client's retries) raises ``SERVER_UNREACHABLE``, and its key is kept by (tool,
arguments): the same call made again is sent under the same key.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from warrant.runner.canonical import canonical_json
from warrant.runner.client.contract import RunnerClient
from warrant.runner.errors import ServiceUnavailable, StateConflict
from warrant.runner.external import Decision, check_shape, in_flight
from warrant.runner.spec import DEFAULT_MAX_PARALLEL_CALLS
from warrant.tools._contract import Tool
from warrant.tools._registry import Registry

__all__ = [
    "BATCH_WINDOW_S",
    "ExternalCalls",
    "granted_tools",
    "newest_tools",
    "newest_version",
    "version_key",
]

#: How long the first of a run's calls waits for others made at the same time (a model's
#: parallel tool calls reach the gateway or the adapter within milliseconds of each other).
BATCH_WINDOW_S = 0.02


def version_key(version: str) -> tuple[Any, ...]:
    """Orders versions: numeric parts as numbers (``"1.10" > "1.9"``)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.split("."))


def newest_tools(registry: Iterable[Tool[Any, Any]]) -> dict[str, Tool[Any, Any]]:
    """The newest version of each tool name of ``registry``."""
    newest: dict[str, Tool[Any, Any]] = {}
    for tool in registry:
        best = newest.get(tool.name)
        if best is None or version_key(tool.version) > version_key(best.version):
            newest[tool.name] = tool
    return newest


def granted_tools(
    tools: Iterable[Tool[Any, Any]], capabilities: Collection[str]
) -> list[Tool[Any, Any]]:
    """The tools each of whose capabilities a grant names: what an agent's session is offered
    (a call to any other is refused by the gate before its arguments are read)."""
    return [t for t in tools if all(c in capabilities for c in t.capabilities)]


def newest_version(registry: Registry, name: str) -> str:
    """The newest version of tool ``name`` (``"unknown"``: the gate refuses it)."""
    versions = [t.version for t in registry.by_name(name)]
    return max(versions, key=version_key) if versions else "unknown"


@dataclass(frozen=True)
class _Call:
    name: str
    arguments: dict[str, Any]
    key: str


@dataclass
class _Batch:
    """Calls of one run made at the same time: proposed together as one parallel step."""

    calls: list[_Call] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    decision: Decision | None = None
    error: BaseException | None = None


class ExternalCalls:
    def __init__(
        self,
        client: RunnerClient,
        registry: Registry,
        *,
        approval_wait_s: float = 0.0,
        decision_wait_s: float = 120.0,
        batch_window_s: float = BATCH_WINDOW_S,
        max_batch: int = DEFAULT_MAX_PARALLEL_CALLS,
    ) -> None:
        self.client = client
        self.registry = registry
        self.approval_wait_s = approval_wait_s
        self.decision_wait_s = decision_wait_s
        self.batch_window_s = batch_window_s
        self.max_batch = max_batch
        self._waiting: dict[tuple[str, bytes], tuple[int, int]] = {}
        self._unsent: dict[tuple[str, bytes], str] = {}
        """Keys of calls whose proposal was not confirmed (the server unreachable)."""
        self._open: dict[str, _Batch] = {}
        self._lock = threading.Lock()

    def call(
        self,
        run_id: str,
        name: str,
        arguments: dict[str, Any],
        *,
        by: str,
        call_id: str | None = None,
    ) -> Decision:
        """Propose the call under ``call_id`` (or pick its earlier proposal up) and wait for
        its decision. Calls of one run made at the same time (within ``batch_window_s``) are
        one parallel step, each gated on its own; a call made while an earlier step is
        undecided waits for it (up to ``decision_wait_s``) instead of being refused
        ``PROPOSAL_IN_FLIGHT``."""
        check_shape({"arguments": arguments})  # too deep, NaN: refused with a code, not a crash
        key = (run_id, canonical_json([name, arguments]))
        with self._lock:
            earlier = self._waiting.pop(key, None)
            unsent = self._unsent.pop(key, None)
        if earlier is not None:
            step, branch = earlier
            decision = self.client.decision(run_id, step, branch=branch)
        else:
            call = _Call(name, arguments, unsent or call_id or f"ext-{uuid.uuid4().hex}")
            try:
                decision = self._together(run_id, call, by=by)
            except ServiceUnavailable:
                with self._lock:
                    self._unsent[key] = call.key  # the same call again: the same key
                raise
        decision = self.settle(decision)
        if not decision.settled:
            with self._lock:
                self._waiting[key] = (decision.step, decision.branch)
        return decision

    def _together(self, run_id: str, call: _Call, *, by: str) -> Decision:
        """Join the run's open batch (or open one and, as its first caller, propose it once
        the window closes); the decision of this call's own branch."""
        with self._lock:
            batch = self._open.get(run_id)
            first = batch is None or len(batch.calls) >= self.max_batch
            if first:
                batch = self._open[run_id] = _Batch()
            assert batch is not None
            branch = len(batch.calls) + 1
            batch.calls.append(call)
        if first:
            time.sleep(self.batch_window_s)  # the calls made meanwhile join this one
            with self._lock:
                if self._open.get(run_id) is batch:
                    del self._open[run_id]
            try:
                batch.decision = self._propose(run_id, batch.calls, by=by)
            except BaseException as exc:
                batch.error = exc
            finally:
                batch.done.set()
        elif not batch.done.wait(self.batch_window_s + self.decision_wait_s):
            raise in_flight(run_id)
        if batch.error is not None:
            raise batch.error
        assert batch.decision is not None
        if len(batch.calls) == 1:
            return batch.decision
        return self.client.decision(run_id, batch.decision.step, branch=branch)

    def _propose(self, run_id: str, calls: list[_Call], *, by: str) -> Decision:
        """One proposal for the batch (a parallel step for several calls, each under its own
        key), proposed once the run takes it: an earlier step still undecided is waited for."""
        proposal = self.proposal(calls[0].name, calls[0].arguments)
        call_id: str | None = calls[0].key
        if len(calls) > 1:
            call_id = None
            proposal = {
                "kind": "parallel",
                "proposal_id": f"ext-{uuid.uuid4().hex[:16]}",
                "calls": [{**self.proposal(c.name, c.arguments), "call_id": c.key} for c in calls],
                "merge": {"at_least": 1},
                "cancel_when_met": False,
            }
        end = time.monotonic() + self.decision_wait_s
        while True:
            try:
                return self.client.propose(run_id, proposal, by=by, call_id=call_id)
            except StateConflict as exc:
                if exc.code != "PROPOSAL_IN_FLIGHT":
                    raise
                info = self.client.get_run(run_id)
                current = self.client.decision(run_id, info.step)
                only = calls[0]
                if len(calls) == 1 and (current.tool, current.arguments) == (
                    only.name,
                    only.arguments,
                ):
                    return current  # the same call, still undecided: pick it up
                left = end - time.monotonic()
                if left <= 0:
                    raise
                self.client.wait_change(run_id, version=info.version, timeout=min(left, 5.0))

    def proposal(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A call as a tool proposal (the tool's newest version)."""
        return {
            "kind": "tool",
            "proposal_id": f"ext-{uuid.uuid4().hex[:16]}",
            "tool": name,
            "tool_version": newest_version(self.registry, name),
            "arguments": arguments,
            "reason_summary": "",
            "source_observation_ids": [],
        }

    def settle(self, d: Decision, *, approval_wait_s: float | None = None) -> Decision:
        """Wait for the gate and the tool, and (bounded) for a person."""
        wait = self.decision_wait_s
        approval = self.approval_wait_s if approval_wait_s is None else approval_wait_s
        if d.state == "pending":
            d = self.client.decision(d.run_id, d.step, branch=d.branch, wait_s=wait)
        if d.state == "awaiting_confirmation" and approval > 0:
            d = self.client.decision(
                d.run_id, d.step, branch=d.branch, wait_s=approval, seen="awaiting_confirmation"
            )
        if d.state == "pending":
            d = self.client.decision(d.run_id, d.step, branch=d.branch, wait_s=wait)
        return d
