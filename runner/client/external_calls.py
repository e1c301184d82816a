"""Tool calls of an agent that runs its own loop, through its run's gate: what the MCP gateway
and the framework adapters (:mod:`warrant.contrib`) share.

:meth:`ExternalCalls.call` proposes one call (planner kind ``external``) and waits for its
decision: the gate and the tool within ``decision_wait_s``, a person within
``approval_wait_s``. A call answered "not decided yet" (waiting for a person, or still in the
tool) is remembered by (tool, arguments): the same call made again picks the same proposal
up and returns its outcome, so it is never proposed twice; so is a call that finds its own
proposal still undecided in the ledger (``PROPOSAL_IN_FLIGHT`` with the same tool and
arguments). Blocking: call it from a thread in async code.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from typing import Any

from warrant.runner.canonical import canonical_json
from warrant.runner.client.contract import RunnerClient
from warrant.runner.errors import StateConflict
from warrant.runner.external import Decision, check_shape
from warrant.tools._contract import Tool
from warrant.tools._registry import Registry

__all__ = ["ExternalCalls", "newest_tools", "newest_version", "version_key"]


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


def newest_version(registry: Registry, name: str) -> str:
    """The newest version of tool ``name`` (``"unknown"``: the gate refuses it)."""
    versions = [t.version for t in registry.by_name(name)]
    return max(versions, key=version_key) if versions else "unknown"


class ExternalCalls:
    def __init__(
        self,
        client: RunnerClient,
        registry: Registry,
        *,
        approval_wait_s: float = 0.0,
        decision_wait_s: float = 120.0,
    ) -> None:
        self.client = client
        self.registry = registry
        self.approval_wait_s = approval_wait_s
        self.decision_wait_s = decision_wait_s
        self._waiting: dict[tuple[str, bytes], int] = {}
        self._lock = threading.Lock()

    def call(self, run_id: str, name: str, arguments: dict[str, Any], *, by: str) -> Decision:
        """Propose the call (or pick its earlier proposal up) and wait for its decision."""
        check_shape({"arguments": arguments})  # too deep, NaN: refused with a code, not a crash
        key = (run_id, canonical_json([name, arguments]))
        with self._lock:
            step = self._waiting.pop(key, None)
        if step is not None:
            decision = self.client.decision(run_id, step)
        else:
            decision = self.propose(run_id, name, arguments, by=by)
        decision = self.settle(decision)
        if not decision.settled:
            with self._lock:
                self._waiting[key] = decision.step
        return decision

    def propose(self, run_id: str, name: str, arguments: dict[str, Any], *, by: str) -> Decision:
        proposal = {
            "kind": "tool",
            "proposal_id": f"ext-{uuid.uuid4().hex[:16]}",
            "tool": name,
            "tool_version": newest_version(self.registry, name),
            "arguments": arguments,
            "reason_summary": "",
            "source_observation_ids": [],
        }
        try:
            decision = self.client.propose(run_id, proposal, by=by)
        except StateConflict as exc:
            if exc.code != "PROPOSAL_IN_FLIGHT":
                raise
            current = self.client.decision(run_id, self.client.get_run(run_id).step)
            if current.tool != name or current.arguments != arguments:
                raise
            return current  # the same call, still undecided: pick it up
        return decision

    def settle(self, d: Decision, *, approval_wait_s: float | None = None) -> Decision:
        """Wait for the gate and the tool, and (bounded) for a person."""
        wait = self.decision_wait_s
        approval = self.approval_wait_s if approval_wait_s is None else approval_wait_s
        if d.state == "pending":
            d = self.client.decision(d.run_id, d.step, wait_s=wait)
        if d.state == "awaiting_confirmation" and approval > 0:
            d = self.client.decision(
                d.run_id, d.step, wait_s=approval, seen="awaiting_confirmation"
            )
        if d.state == "pending":
            d = self.client.decision(d.run_id, d.step, wait_s=wait)
        return d

    def decide(self, d: Decision, *, approved: bool, by: str) -> Decision:
        """A person's decision on a call that waits for one, given through the agent's own
        approval mechanism: confirmed (or declined) in warrant, bound to the exact proposal
        hash, then the call's decision. The call made again picks this outcome up."""
        if d.state != "awaiting_confirmation" or not d.proposal_hash:
            return d
        if approved:
            self.client.confirm(d.run_id, proposal_hash=d.proposal_hash, by=by)
        else:
            self.client.decline(d.run_id, proposal_hash=d.proposal_hash, by=by)
        return self.settle(self.client.decision(d.run_id, d.step), approval_wait_s=0)
