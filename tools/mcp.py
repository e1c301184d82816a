"""MCP servers as tools: the operator declares which tools of which server warrant may run.

``WARRANT_MCP_CONFIG`` names a JSON (or ``.toml``) file listing MCP servers, each reached over
stdio (``command``) or streamable HTTP (``url``), and for each server the tools warrant exposes
with their policy: side effect, capability, confirmation, time limit. A tool the server has but
the file does not declare never enters the registry, so the gate refuses it
(``UNKNOWN_TOOL_OR_VERSION``).

At load time each server is asked once for its tools (``tools/list``); every declared tool must
exist there, and its ``inputSchema`` becomes the contract's input schema (closed with
``additionalProperties: false`` unless the server says otherwise) and validates arguments with
``jsonschema``. Each call opens its own client session (nothing is held across a worker's fork)
and is bounded by ``min(timeout_s, ctx.remaining_s())``. Outcomes:

* ``isError`` result or a JSON-RPC error -> failed, not retryable (``MCP_TOOL_ERROR``);
* the server cannot be reached before the call is sent -> failed, retryable
  (``MCP_SERVER_UNAVAILABLE``);
* a timeout or a lost connection after the call was sent -> for a read, failed and retryable
  (``MCP_TIMEOUT``); for any write, unknown (``MCP_OUTCOME_UNKNOWN``): the tool has no
  ``reconcile``, so the reconciler hands the run to a person.

The output is untrusted content: an outside server's text is data, never instructions.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import sys
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self, TextIO

import anyio
import httpx
from celery.exceptions import SoftTimeLimitExceeded
from jsonschema import FormatChecker
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from warrant.runner.codes import ObservationSource
from warrant.runner.errors import PluginError, ToolFailed, ToolUnknown
from warrant.tools.contract import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TOOL_TIMEOUT_S,
    ConfirmationPolicy,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
)
from warrant.tools.plugins import Plugin

__all__ = [
    "McpConfig",
    "McpInput",
    "McpOutput",
    "ServerDeclaration",
    "ToolDeclaration",
    "load_config",
    "mcp_plugins",
]

_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
Name = Annotated[str, StringConstraints(pattern=_NAME)]
#: Kept back from the call's time limit so the client times out before Celery's soft limit.
_MARGIN_S = 0.2
_MAX_MESSAGE = 500
_CONNECTION_CLOSED = -32000  # mcp.types.CONNECTION_CLOSED


# --- the configuration file ------------------------------------------------------------------


class ToolDeclaration(BaseModel):
    """The operator's declaration of one server tool: what warrant needs to govern it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    side_effect: SideEffect
    """``read``, ``idempotent-write``, ``compensatable-write`` or ``irreversible``."""
    capability: str | list[str] = Field(min_length=1)
    """The grant capability (or capabilities) a run needs to call it."""
    name: Name | None = None
    """The registry name, if not the server's (e.g. two servers with one tool name)."""
    version: str = Field(default="1", min_length=1, max_length=32)
    description: str | None = None
    """Replaces the server's description."""
    resource_argument: str | None = None
    """The argument whose value is the grant resource; ``"*"`` when not set."""
    confirmation: ConfirmationPolicy = ConfirmationPolicy.NEVER
    timeout_s: float = Field(default=DEFAULT_TOOL_TIMEOUT_S, gt=0, le=3600)
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1, le=20)
    sensitive_fields: list[str] = Field(default_factory=list)
    """Arguments masked in confirmation requests and handoff bundles."""

    @property
    def capabilities(self) -> tuple[str, ...]:
        return (self.capability,) if isinstance(self.capability, str) else tuple(self.capability)


class ServerDeclaration(BaseModel):
    """One MCP server: exactly one of ``command`` (stdio) and ``url`` (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] | None = Field(default=None, min_length=1)
    """Spawned for every session: ``[executable, *args]``."""
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    env: dict[str, str] = Field(default_factory=dict)
    """Added to the MCP SDK's minimal inherited environment (stdio only)."""
    cwd: Path | None = None
    """Working directory of the command, relative to the configuration file (stdio only)."""
    connect_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """Time limit of the load-time ``tools/list``."""
    tools: dict[Name, ToolDeclaration] = Field(min_length=1)
    """The exposed tools, by the server's tool name. Nothing else is exposed."""

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of 'command' (stdio) and 'url' (streamable HTTP)")
        if self.url is not None and (self.env or self.cwd is not None):
            raise ValueError("'env' and 'cwd' apply to a 'command' server only")
        return self


class McpConfig(BaseModel):
    """The file ``WARRANT_MCP_CONFIG`` names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: dict[Name, ServerDeclaration]


def _invalid(path: Path, message: str) -> PluginError:
    return PluginError(f"MCP config {path}: {message}", code="MCP_CONFIG_INVALID")


def load_config(path: Path) -> McpConfig:
    """Read and validate the file; ``PluginError(code="MCP_CONFIG_INVALID")`` names the file
    and each bad field. A relative ``cwd`` is resolved against the file's directory."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except OSError as exc:
        raise _invalid(path, f"cannot be read ({exc.strerror or exc})") from exc
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise _invalid(path, f"is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from exc
    try:
        config = McpConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise _invalid(path, problems) from exc
    servers = {
        name: server.model_copy(update={"cwd": path.parent / server.cwd})
        if server.cwd is not None and not server.cwd.is_absolute()
        else server
        for name, server in config.servers.items()
    }
    return McpConfig(servers=servers)


# --- the contract's input and output models --------------------------------------------------


class McpInput(ToolInput):
    """Arguments of an MCP tool: a JSON object, validated against the server's inputSchema."""

    model_config = ConfigDict(extra="allow")

    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    """The schema arguments are validated against (and that the contract reports)."""
    validator: ClassVar[Validator | None] = None

    @model_validator(mode="after")
    def _check_schema(self) -> Self:
        if self.validator is None:
            return self
        errors = sorted(self.validator.iter_errors(self.arguments()), key=lambda e: list(e.path))
        if errors:
            raise ValidationError.from_exception_data(
                type(self).__name__, [_error_details(e) for e in errors]
            )
        return self

    def arguments(self) -> dict[str, Any]:
        """The arguments as the server receives them."""
        return dict(self.model_extra or {})

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The server's inputSchema (as closed by warrant), not a pydantic-generated one."""
        return copy.deepcopy(cls.input_schema)


def _error_details(error: Any) -> InitErrorDetails:
    """One jsonschema error as a pydantic line error: an unexpected argument is
    ``extra_forbidden`` at that argument, anything else ``mcp_schema`` at its top argument (a
    missing required one: at that argument), so the gate's codes name the argument."""
    path = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties" and not path:
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        field = extra[0] if extra else "input"
        kind = PydanticCustomError("extra_forbidden", "{message}", {"message": error.message})
        return InitErrorDetails(type=kind, loc=(field,), input=error.instance)
    if error.validator == "required" and not path:
        path = [r for r in error.validator_value if r not in error.instance][:1]
    kind = PydanticCustomError("mcp_schema", "{message}", {"message": error.message})
    loc = (path[0],) if path else ()
    return InitErrorDetails(type=kind, loc=loc, input=error.instance)


def input_model_for(tool_name: str, schema: dict[str, Any]) -> type[McpInput]:
    """A :class:`McpInput` subclass for one server tool. Raises ``SchemaError``."""
    closed = copy.deepcopy(schema)
    closed.setdefault("type", "object")
    closed.setdefault("additionalProperties", False)
    validator_class = validator_for(closed)
    validator_class.check_schema(closed)
    camel = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", tool_name))
    namespace = {
        "__module__": __name__,
        "__doc__": f"Arguments of the MCP tool {tool_name}.",
        "input_schema": closed,
        "validator": validator_class(closed, format_checker=FormatChecker()),
    }
    return type(f"Mcp{camel}Input", (McpInput,), namespace)


class McpOutput(ToolOutput):
    """What an MCP tool returned (untrusted content)."""

    content: list[dict[str, Any]] = Field(default_factory=list)
    """The result's content blocks, as the server sent them."""
    structured: dict[str, Any] | None = None
    """The result's ``structuredContent``, if any."""
    text: str = ""
    """The text blocks, joined by newlines."""


# --- sessions and calls -----------------------------------------------------------------------


@functools.cache
def _devnull() -> TextIO:
    return open(os.devnull, "w")  # one per process, never closed


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours, if it is a real file (not pytest's capture)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return _devnull()
    return sys.stderr


@asynccontextmanager
async def _session(server: ServerDeclaration) -> AsyncIterator[Any]:
    """An initialized client session to ``server``, closed on exit."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if server.command is not None:
        params = StdioServerParameters(
            command=server.command[0],
            args=server.command[1:],
            env=dict(server.env) or None,
            cwd=server.cwd,
        )
        transport = stdio_client(params, errlog=_errlog())
    else:
        assert server.url is not None
        transport = streamable_http_client(server.url)
    async with transport as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


async def _list_tools(server: ServerDeclaration) -> dict[str, Any]:
    async with _session(server) as session:
        tools: dict[str, Any] = {}
        cursor: str | None = None
        while True:
            page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
            tools.update({t.name: t for t in page.tools})
            cursor = page.nextCursor
            if not cursor:
                return tools


@dataclass
class _Progress:
    sent: bool = False
    """The ``tools/call`` request may have reached the server."""
    result: Any = None
    """The server's answer, once received (closing the session may still fail after it)."""


async def _call_tool(
    server: ServerDeclaration, name: str, arguments: dict[str, Any], progress: _Progress
) -> Any:
    async with _session(server) as session:
        progress.sent = True
        progress.result = await session.call_tool(name, arguments)
        return progress.result


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc
        if exc.__cause__ is not None:
            yield from _leaves(exc.__cause__)


def _classify(exc: Exception, *, sent: bool, write: bool, where: str) -> BaseException:
    """The typed outcome of a call that did not return a result."""
    from mcp.shared.exceptions import McpError

    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, SoftTimeLimitExceeded):
            return leaf  # Celery's limit (or a cancellation): the tool stage decides
    detail = next((str(leaf) for leaf in leaves if str(leaf)), type(exc).__name__)
    if not sent or any(isinstance(leaf, httpx.ConnectError) for leaf in leaves):
        return ToolFailed(
            f"{where}: server unavailable ({detail})"[:_MAX_MESSAGE],
            code="MCP_SERVER_UNAVAILABLE",
            retryable=True,
        )
    for leaf in leaves:
        if isinstance(leaf, McpError) and leaf.error.code != _CONNECTION_CLOSED:
            return ToolFailed(
                f"{where}: {leaf.error.message}"[:_MAX_MESSAGE], code="MCP_TOOL_ERROR"
            )
    timed_out = any(isinstance(leaf, TimeoutError) for leaf in leaves)
    what = "timed out" if timed_out else f"connection lost ({detail})"
    if write:
        return ToolUnknown(
            f"{where}: {what} after the call was sent"[:_MAX_MESSAGE], code="MCP_OUTCOME_UNKNOWN"
        )
    return ToolFailed(f"{where}: {what}"[:_MAX_MESSAGE], code="MCP_TIMEOUT", retryable=True)


def _output(result: Any) -> McpOutput:
    blocks = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content]
    text = "\n".join(b["text"] for b in blocks if b.get("type") == "text")
    return McpOutput(content=blocks, structured=result.structuredContent, text=text)


@dataclass(frozen=True)
class _Executor:
    """Runs one declared tool: a fresh session per call, the result typed as an outcome."""

    server_name: str
    server: ServerDeclaration
    remote_name: str
    declaration: ToolDeclaration

    def __call__(self, args: McpInput, ctx: ToolContext) -> McpOutput:
        where = f"MCP {self.server_name}/{self.remote_name}"
        limit = min(self.declaration.timeout_s, ctx.remaining_s()) - _MARGIN_S
        write = self.declaration.side_effect is not SideEffect.READ
        progress = _Progress()
        call = partial(_call_tool, self.server, self.remote_name, args.arguments(), progress)
        try:
            result = anyio.run(_bounded, max(limit, 0.01), call)
        except Exception as exc:
            if progress.result is None:
                raise _classify(exc, sent=progress.sent, write=write, where=where) from exc
            result = progress.result  # answered; only closing the session failed
        if result.isError:
            text = _output(result).text or "the server reported an error"
            raise ToolFailed(f"{where}: {text}"[:_MAX_MESSAGE], code="MCP_TOOL_ERROR")
        return _output(result)


async def _bounded(limit_s: float, call: Any) -> Any:
    with anyio.fail_after(limit_s):
        return await call()


# --- building the plug-ins --------------------------------------------------------------------


def _resource(argument: str | None) -> Any:
    """The grant resource of a call: the value of ``argument`` (plain), ``"*"`` without one."""

    def resource(args: McpInput, _subject: str) -> str:
        if argument is None:
            return "*"
        value = args.arguments().get(argument, "")
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)

    return resource


def _tool(
    path: Path, server_name: str, server: ServerDeclaration, remote: Any, decl: ToolDeclaration
) -> Tool[Any, Any]:
    where = f"servers.{server_name}.tools.{remote.name}"
    try:
        input_model = input_model_for(decl.name or remote.name, dict(remote.inputSchema))
    except SchemaError as exc:
        raise PluginError(
            f"MCP server {server_name} ({path}): tool {remote.name} reports an invalid "
            f"inputSchema: {exc.message}",
            code="MCP_SERVER_UNAVAILABLE",
        ) from exc
    properties = input_model.input_schema.get("properties", {})
    for field in [decl.resource_argument, *decl.sensitive_fields]:
        if field is not None and field not in properties:
            raise _invalid(path, f"{where}: {field!r} is not an argument of {remote.name}")
    return Tool(
        name=decl.name or remote.name,
        version=decl.version,
        description=decl.description
        or remote.description
        or f"{remote.name} on MCP server {server_name}",
        input_model=input_model,
        output_model=McpOutput,
        capabilities=decl.capabilities,
        side_effect=decl.side_effect,
        execute=_Executor(server_name, server, remote.name, decl),
        confirmation=decl.confirmation,
        timeout_s=decl.timeout_s,
        resource=_resource(decl.resource_argument),
        sensitive_fields=frozenset(decl.sensitive_fields),
        output_source=ObservationSource.UNTRUSTED_CONTENT,
        max_attempts=decl.max_attempts,
    )


def server_tools(path: Path, name: str, server: ServerDeclaration) -> list[Tool[Any, Any]]:
    """Ask ``server`` for its tools once and build a contract for each declared one."""
    source = f"MCP server {name} ({path})"
    try:
        offered = anyio.run(_bounded, server.connect_timeout_s, partial(_list_tools, server))
    except Exception as exc:
        detail = next((str(x) for x in _leaves(exc) if str(x)), type(exc).__name__)
        raise PluginError(
            f"{source} cannot be reached: {detail}", code="MCP_SERVER_UNAVAILABLE"
        ) from exc
    missing = sorted(set(server.tools) - set(offered))
    if missing:
        raise PluginError(
            f"{source} does not offer the declared tool(s) {', '.join(missing)}",
            code="MCP_SERVER_UNAVAILABLE",
        )
    return [
        _tool(path, name, server, offered[remote], decl) for remote, decl in server.tools.items()
    ]


def mcp_plugins(path: Path) -> list[Plugin]:
    """One :class:`Plugin` per server of the file, named ``mcp:<server>``. Raises
    :class:`PluginError` (``MCP_CONFIG_INVALID``, ``MCP_SERVER_UNAVAILABLE``)."""
    config = load_config(path)
    return [
        Plugin(
            name=f"mcp:{name}",
            tools=tuple(server_tools(path, name, server)),
            source=f"MCP server {name} ({path})",
        )
        for name, server in config.servers.items()
    ]
