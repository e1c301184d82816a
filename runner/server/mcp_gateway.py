"""``warrant mcp serve``: warrant's gate in front of any MCP client.

Each ``tools/call`` of an MCP session is a proposal of that session's run (planner kind
``external``), decided by warrant's gate and executed, or not, by warrant's tool workers.

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
* ``tools/list`` shows the tools the session's grants cover (every capability of the tool
  named by a grant of its run, or of the template before the run starts); a call to any other
  is refused by the gate before its arguments are read (``MISSING_CAPABILITY``).
* Exactly once: each call is proposed under the key ``mcp:<session>:<request id>`` (or the
  client's own, ``_meta["warrant/call_id"]``): the ledger keeps it with the step, so the same
  request again (a transport's resend) returns the same decision, never a second command. A
  client that sends the same call as a new request after a lost answer is held by the tool's
  business effect key (``DUPLICATE_EFFECT`` with the earlier outcome).

Results: only an executed call that succeeded is a success; every other decision is a tool
error (``isError``) whose first text says what happened, led by its stable code, and whose
``structuredContent.warrant`` carries the decision. An unknown effect is never reported as a
success: it says ``UNKNOWN_EFFECT`` and that the reconciler decides.

Transports: stdio serves one client, one session; it proposes as ``--as NAME`` (the process's
user is trusted as a producer would be). Streamable HTTP (``/mcp``): every request carries an
API token (``Authorization: Bearer``) whose role may propose (``producer`` or ``operator``),
else ``401``/``403`` in the API's error shape; the token's label is who proposed. Approving is
never the caller's to do: a person confirms with an approver token (inbox, API, CLI).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server

from warrant.runner.authz import Action, require
from warrant.runner.client.contract import RunnerClient
from warrant.runner.client.external_calls import ExternalCalls, granted_tools, newest_tools
from warrant.runner.errors import WarrantError
from warrant.runner.external import WAITING_FOR_APPROVAL, Decision, explain
from warrant.runner.server.http.errors import warrant_error_response
from warrant.runner.spec import granted_capabilities
from warrant.tools._contract import SideEffect, Tool
from warrant.tools._registry import Registry

__all__ = [
    "RUN_KEY_HEADER",
    "WAITING_FOR_APPROVAL",
    "Caller",
    "Gateway",
    "GatewayOptions",
    "annotations_of",
    "build_server",
    "http_app",
    "mcp_tools",
    "result_of",
    "serve_stdio",
]

#: The header that continues a run across MCP sessions over HTTP.
RUN_KEY_HEADER = "warrant-run-key"


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
    key: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    """Names the session in its calls' keys."""


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

    async def call(
        self,
        caller: Caller,
        name: str,
        arguments: dict[str, Any],
        *,
        request_id: Any = None,
        call_id: str | None = None,
    ) -> Any:
        """One ``tools/call``, proposed under ``call_id`` (the client's own key) or, for a
        request with an id, ``mcp:<session>:<request id>``."""
        state = self._sessions.setdefault(caller.session, _Session())
        if call_id is None and request_id is not None:
            call_id = f"mcp:{state.key}:{request_id}"[:200]
        async with state.lock:
            try:
                return await self._call(state, caller, name, arguments, call_id=call_id)
            except WarrantError as exc:
                return error_result(exc.code, str(exc), run_id=state.run_id)

    async def _call(
        self,
        state: _Session,
        caller: Caller,
        name: str,
        arguments: dict[str, Any],
        *,
        call_id: str | None,
    ) -> Any:
        if self.options.tools is not None and name not in self.options.tools:
            return error_result("UNKNOWN_TOOL_OR_VERSION", f"{name!r} is not offered here")
        if state.run_id is None:
            state.run_id = await _thread(self._start, caller)
        decision = await _thread(
            self.calls.call, state.run_id, name, arguments, by=caller.by, call_id=call_id
        )
        return result_of(decision)

    async def listed(self, session: Any) -> list[types.Tool]:
        """What ``tools/list`` shows this session: the tools its grants cover."""
        state = self._sessions.get(session)
        if state is not None and state.run_id is not None:
            info = await _thread(self.client.get_run, state.run_id)
            capabilities = info.capabilities
        else:
            capabilities = granted_capabilities(self.options.spec)
        offered = granted_tools(self.registry, capabilities)
        return mcp_tools(offered, only=self.options.tools)

    def _start(self, caller: Caller) -> str:
        spec = {**self.options.spec, "planner": {"kind": "external", "agent": "mcp"}}
        key = caller.run_key or self.options.run_key
        idempotency_key = f"mcp:{caller.name}:{key}"[:200] if key else None
        run_id = self.client.start_run(spec, idempotency_key=idempotency_key, started_by=caller.by)
        return run_id


async def _thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)


# --- the registry's tools as MCP tools (derived from the contract, never declared twice) ------

_DESTRUCTIVE = frozenset({SideEffect.IRREVERSIBLE, SideEffect.COMPENSATABLE_WRITE})
_IDEMPOTENT = frozenset({SideEffect.READ, SideEffect.IDEMPOTENT_WRITE})


def annotations_of(tool: Tool[Any, Any]) -> types.ToolAnnotations:
    """``readOnlyHint``: the tool only reads (side effect ``read``); ``destructiveHint``: it may
    change the world in a way a retry or an undo cannot take back (``irreversible`` or
    ``compensatable-write``); ``idempotentHint``: calling it again with the same arguments
    changes nothing more (``read``, ``idempotent-write``); ``openWorldHint``: it talks to hosts
    outside the deployment (its contract names an egress)."""
    read = tool.side_effect is SideEffect.READ
    return types.ToolAnnotations(
        title=tool.name,
        readOnlyHint=read,
        destructiveHint=False if read else tool.side_effect in _DESTRUCTIVE,
        idempotentHint=tool.side_effect in _IDEMPOTENT,
        openWorldHint=bool(tool.egress),
    )


def mcp_tools(registry: Iterable[Tool[Any, Any]], *, only: frozenset[str] | None) -> list[Any]:
    """One MCP tool per tool name (its newest version), sorted, limited to ``only``."""
    newest = newest_tools(t for t in registry if only is None or t.name in only)
    return [_mcp_tool(newest[name]) for name in sorted(newest)]


def _mcp_tool(tool: Tool[Any, Any]) -> types.Tool:
    note = f" [warrant: {tool.side_effect.value}; confirmation {tool.confirmation.value}]"
    return types.Tool(
        name=tool.name,
        description=(tool.description or tool.name) + note,
        inputSchema=tool.describe()["inputSchema"],
        annotations=annotations_of(tool),
        _meta={"warrant/version": tool.version, "warrant/capabilities": list(tool.capabilities)},
    )


# --- a decision as an MCP tool result ---------------------------------------------------------

_SUMMARY = (
    "run_id",
    "step",
    "state",
    "code",
    "outcome",
    "observation_id",
    "proposal_hash",
    "run_status",
    "earlier",
)


def error_result(code: str, message: str, **warrant: Any) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structuredContent={"warrant": {"code": code, **warrant}},
        isError=True,
    )


def result_of(d: Decision) -> types.CallToolResult:
    meta = {k: getattr(d, k) for k in _SUMMARY if getattr(d, k) is not None}
    if d.state == "executed" and d.outcome == "succeeded":
        text = json.dumps(d.output, sort_keys=True) if d.output is not None else "ok"
        structured = d.output if isinstance(d.output, dict) else {"result": d.output}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structuredContent=structured,
            isError=False,
            _meta={"warrant": meta},
        )
    code, message = explain(d)
    return error_result(code, message, **{k: v for k, v in meta.items() if k != "code"})


# --- the transports ---------------------------------------------------------------------------


def build_server(gateway: Gateway, *, stdio_identity: str | None = None) -> Server[Any, Any]:
    server: Server[Any, Any] = Server(
        "warrant",
        instructions=(
            "Every tool call is a proposal that warrant's gate decides: it may be refused "
            "(the error says why, with a stable code), wait for a person's approval, or run. "
            "An UNKNOWN_EFFECT result means nobody knows yet whether the call took effect."
        ),
    )

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return await gateway.listed(server.request_context.session)

    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        ctx = server.request_context
        meta = ctx.meta.model_dump() if ctx.meta is not None else {}
        own = meta.get("warrant/call_id")
        return await gateway.call(
            _caller(ctx, stdio_identity),
            name,
            arguments or {},
            request_id=ctx.request_id,
            call_id=str(own) if own is not None else None,
        )

    return server


def _caller(ctx: Any, stdio_identity: str | None) -> Caller:
    request = ctx.request
    if request is None:  # stdio
        by = stdio_identity or "mcp-stdio"
        return Caller(session=ctx.session, by=by, name=by)
    identity = request.scope["state"]["warrant_identity"]
    return Caller(
        session=ctx.session,
        by=identity.label,
        name=identity.name,
        run_key=request.headers.get(RUN_KEY_HEADER) or None,
    )


async def serve_stdio(gateway: Gateway, *, identity: str) -> None:
    """Serve one client on this process's stdin/stdout until it closes them."""
    from mcp.server.stdio import stdio_server

    server = build_server(gateway, stdio_identity=identity)
    async with stdio_server() as (read, write):
        options = server.create_initialization_options(NotificationOptions(), {})
        await server.run(read, write, options)


def http_app(gateway: Gateway, tokens: Any) -> Any:
    """The ASGI app: streamable HTTP at ``/mcp``, each request authenticated by ``tokens``."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(app=build_server(gateway), json_response=False)

    class Endpoint:  # an ASGI object (not a function): Starlette hands it the raw scope
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            auth = headers.get("authorization", "")
            token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
            try:
                identity = await anyio.to_thread.run_sync(tokens.authenticate, token)
                require(identity, Action.PROPOSE)
            except WarrantError as exc:
                await warrant_error_response(exc)(scope, receive, send)
                return
            scope.setdefault("state", {})["warrant_identity"] = identity
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)
