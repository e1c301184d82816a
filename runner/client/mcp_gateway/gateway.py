"""The MCP gateway's core: each ``tools/call`` of an MCP session is a proposal of that
session's run (planner kind ``external``), decided by warrant's gate and executed, or not, by
warrant's tool workers.

* One run per MCP session, started at its first call from the operator's run spec template
  (goal, subject, grants, budgets; the planner is always ``external``). A run key (``--run-key``
  for stdio, the ``Warrant-Run-Key`` header over HTTP) continues one run across sessions: it is
  the run's idempotency key, scoped to the caller's name.
* Calls of one session are taken one at a time (a run has one proposal in flight).
* A call that needs a person waits up to ``approval_wait_s`` for the decision on its exact hash
  (inbox, API, CLI), then executes; past that it returns ``WAITING_FOR_APPROVAL``. Calling
  again with the same arguments (in any session of the run, while this gateway process
  lives) picks the same proposal up and returns its outcome: it is never proposed twice. A
  gateway restarted meanwhile finds a proposal that still waits, but not one that has since
  run: the same call then is a new proposal, and a write needs a person again.
* Once the run ended (a budget, a loop, a deadline, a cancel) every call is refused: the
  session's limits hold (fail closed).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import types

from warrant.runner.canonical import canonical_json
from warrant.runner.client.mcp_gateway.listing import mcp_tools
from warrant.runner.client.mcp_gateway.results import error_result, result_of
from warrant.runner.errors import StateConflict, WarrantError
from warrant.runner.external import Decision
from warrant.tools.registry import Registry

__all__ = ["Caller", "Gateway", "GatewayOptions"]


@dataclass(frozen=True, kw_only=True)
class GatewayOptions:
    spec: dict[str, Any]
    """The run spec template of a session's run (its ``planner`` is replaced)."""
    run_key: str | None = None
    """Continue the run of this key (stdio); over HTTP the caller's header does."""
    approval_wait_s: float = 60.0
    """How long a call that needs a person waits for the decision before it returns."""
    decision_wait_s: float = 120.0
    """How long a call waits for the gate and the tool (the tool's own limits apply)."""
    tools: frozenset[str] | None = None
    """The tools listed (None: every tool of the registry)."""


@dataclass(frozen=True)
class Caller:
    session: Any
    """What identifies the MCP session (its server-side session object)."""
    by: str
    """Who proposes (the token's label, or the stdio identity)."""
    name: str
    """The caller's name (run keys are scoped to it)."""
    run_key: str | None = None


@dataclass
class _Session:
    run_id: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Gateway:
    def __init__(self, client: Any, registry: Registry, options: GatewayOptions) -> None:
        self.client = client
        self.registry = registry
        self.options = options
        self._sessions: dict[Any, _Session] = {}
        self._waiting: dict[str, dict[bytes, int]] = {}
        """Per run, the calls answered "not decided yet", by (tool, arguments): the step to
        pick up when the same call comes again (from any session of the run)."""

    def list_tools(self) -> list[types.Tool]:
        return mcp_tools(self.registry, only=self.options.tools)

    def forget(self, session: Any) -> None:
        """The MCP session ended (its run stays; a run key continues it)."""
        self._sessions.pop(session, None)

    async def call(self, caller: Caller, name: str, arguments: dict[str, Any]) -> Any:
        state = self._sessions.setdefault(caller.session, _Session())
        async with state.lock:
            try:
                return await self._call(state, caller, name, arguments)
            except WarrantError as exc:
                return error_result(exc.code, str(exc), run_id=state.run_id)

    async def _call(
        self, state: _Session, caller: Caller, name: str, arguments: dict[str, Any]
    ) -> Any:
        if self.options.tools is not None and name not in self.options.tools:
            return error_result("UNKNOWN_TOOL_OR_VERSION", f"{name!r} is not offered here")
        if state.run_id is None:
            state.run_id = await _thread(self._start, caller)
        run_id = state.run_id
        key = canonical_json([name, arguments])
        waiting = self._waiting.setdefault(run_id, {})
        step = waiting.pop(key, None)
        if step is not None:
            decision = await _thread(self.client.decision, run_id, step)
        else:
            decision = await _thread(self._propose, run_id, caller.by, name, arguments)
        decision = await self._settle(decision)
        if not decision.settled:
            waiting[key] = decision.step
        return result_of(decision)

    def _start(self, caller: Caller) -> str:
        spec = {**self.options.spec, "planner": {"kind": "external", "agent": "mcp"}}
        key = caller.run_key or self.options.run_key
        idempotency_key = f"mcp:{caller.name}:{key}"[:200] if key else None
        run_id: str = self.client.start_run(
            spec, idempotency_key=idempotency_key, started_by=caller.by
        )
        return run_id

    def _propose(self, run_id: str, by: str, name: str, arguments: dict[str, Any]) -> Decision:
        proposal = {
            "kind": "tool",
            "proposal_id": f"mcp-{uuid.uuid4().hex[:16]}",
            "tool": name,
            "tool_version": self._version_of(name),
            "arguments": arguments,
            "reason_summary": "",
            "source_observation_ids": [],
        }
        try:
            decision: Decision = self.client.propose(run_id, proposal, by=by)
        except StateConflict as exc:
            if exc.code != "PROPOSAL_IN_FLIGHT":
                raise
            current = self.client.decision(run_id, self.client.get_run(run_id).step)
            if current.tool != name or current.arguments != arguments:
                raise
            return current  # the same call, still undecided: pick it up
        return decision

    def _version_of(self, name: str) -> str:
        versions = [t.version for t in self.registry.by_name(name)]
        return max(versions, key=_version_key) if versions else "unknown"

    async def _settle(self, d: Decision) -> Decision:
        """Wait for the gate and the tool, and (bounded) for a person."""
        wait = self.options.decision_wait_s
        if d.state == "pending":
            d = await _thread(self.client.decision, d.run_id, d.step, wait_s=wait)
        if d.state == "awaiting_confirmation" and self.options.approval_wait_s > 0:
            d = await _thread(
                self.client.decision,
                d.run_id,
                d.step,
                wait_s=self.options.approval_wait_s,
                seen="awaiting_confirmation",
            )
            if d.state == "pending":
                d = await _thread(self.client.decision, d.run_id, d.step, wait_s=wait)
        return d


def _version_key(version: str) -> tuple[Any, ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.split("."))


async def _thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)
