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
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import types

from warrant.runner.client.contract import RunnerClient
from warrant.runner.client.external_calls import ExternalCalls
from warrant.runner.errors import WarrantError
from warrant.runner.server.mcp_gateway.listing import mcp_tools
from warrant.runner.server.mcp_gateway.results import error_result, result_of
from warrant.tools._registry import Registry

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
    def __init__(self, client: RunnerClient, registry: Registry, options: GatewayOptions) -> None:
        self.client = client
        self.registry = registry
        self.options = options
        self._sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()
        """Per MCP session (gone with it)."""
        self.calls = ExternalCalls(
            client,
            registry,
            approval_wait_s=options.approval_wait_s,
            decision_wait_s=options.decision_wait_s,
        )

    def list_tools(self) -> list[types.Tool]:
        return mcp_tools(self.registry, only=self.options.tools)

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
        decision = await _thread(self.calls.call, state.run_id, name, arguments, by=caller.by)
        return result_of(decision)

    def _start(self, caller: Caller) -> str:
        spec = {**self.options.spec, "planner": {"kind": "external", "agent": "mcp"}}
        key = caller.run_key or self.options.run_key
        idempotency_key = f"mcp:{caller.name}:{key}"[:200] if key else None
        run_id = self.client.start_run(spec, idempotency_key=idempotency_key, started_by=caller.by)
        return run_id


async def _thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)
