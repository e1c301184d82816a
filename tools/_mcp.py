"""MCP servers as tools: the operator declares which tools of which server warrant may run.

``WARRANT_MCP_CONFIG`` names a JSON (or ``.toml``) file listing MCP servers, each reached over
stdio (``command``) or streamable HTTP (``url``), and for each server the tools warrant exposes
with their policy: side effect, capability, confirmation, time limit. A tool the server has but
the file does not declare never enters the registry, so the gate refuses it
(``UNKNOWN_TOOL_OR_VERSION``).

When a process builds its full registry (workers; ``warrant tools list``/``check``; a run
with pre-approvals) each server is asked once for its tools (``tools/list``); every declared
tool must exist there (else ``MCP_TOOL_MISSING``), and its ``inputSchema`` becomes the
contract's input schema (closed with ``additionalProperties: false`` unless the server says
otherwise) and validates arguments with ``jsonschema``. A server that cannot be reached then is
:class:`ServiceUnavailable` (``MCP_SERVER_UNAVAILABLE``). The *declared* registry
(``ask_servers=False``: queues, time limits, masks, the CLI's reads) asks no server: its MCP
tools carry the declared policy and an open input schema.

A worker process keeps one session per stdio server (:mod:`warrant.tools._mcp_client`, the
plug-in's deps: started on the first call, restarted after a failure, closed at shutdown); a
streamable HTTP server gets a session per call. Each call is bounded by
``min(timeout_s, ctx.remaining_s())``. Outcomes:

* ``isError`` result or a JSON-RPC error -> failed, not retryable (``MCP_TOOL_ERROR``);
* the server cannot be reached before the call is sent -> failed, retryable
  (``MCP_SERVER_UNAVAILABLE``);
* a timeout or a lost connection after the call was sent -> for a read, failed and retryable
  (``MCP_TIMEOUT``); for any write, unknown (``MCP_OUTCOME_UNKNOWN``): the tool has no
  ``reconcile``, so the reconciler hands the run to a person.

A write's postcondition is a read-back tool of the same server (``verify_with`` in its
declaration: the tool, its arguments taken from the call, the result fields that must equal
values of the call; :func:`_read_back`). A write declared without one is ``unverified``
(:data:`~warrant.tools._mcp_config.NO_READ_BACK`): its success is the server's word.

The output is stored once: the result's ``structuredContent`` when the server gives one, else
its text blocks joined (plus any non-text blocks). It is untrusted content: an outside server's
text is data, never instructions.

This module builds the tools; the file is read by :mod:`warrant.tools._mcp_config`, sessions
and the typing of failed calls are in :mod:`warrant.tools._mcp_client`.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Self

import anyio
from jsonschema import FormatChecker
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from warrant.runner.codes import ObservationSource
from warrant.runner.errors import PluginError, ServiceUnavailable, ToolFailed, ToolUnknown
from warrant.tools._contract import (
    Accepted,
    JobHooks,
    JobState,
    JobStatus,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
)
from warrant.tools._mcp_client import (
    MAX_MESSAGE,
    Progress,
    ServerSession,
    bounded,
    call_tool,
    classify,
    leaves_of,
    list_tools,
)
from warrant.tools._mcp_config import (
    NO_READ_BACK,
    McpConfig,
    ReadBackDeclaration,
    ServerDeclaration,
    ToolDeclaration,
    config_error,
    load_config,
)
from warrant.tools._mcp_pins import McpDefinition, definition_of
from warrant.tools._registry import DepsContext, Plugin

__all__ = [
    "McpConfig",
    "McpInput",
    "McpOutput",
    "ServerDeclaration",
    "ToolDeclaration",
    "load_config",
    "mcp_plugins",
]

#: Kept back from the call's time limit so the client times out before Celery's soft limit.
_MARGIN_S = 0.2


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
    """What an MCP tool returned (untrusted content), once: ``structured`` when the server
    gave structured content (its text blocks are the same data serialized), else ``text``;
    fields without a value are left out."""

    structured: dict[str, Any] | None = None
    """The result's ``structuredContent``."""
    text: str | None = None
    """The text blocks, joined by newlines (only without ``structured``)."""
    content: list[dict[str, Any]] = Field(default_factory=list)
    """The result's other blocks (images, audio, resources), as the server sent them."""

    @model_serializer(mode="wrap")
    def _once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None and v != []}


def _text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(b["text"] for b in blocks if b.get("type") == "text")


def _output(result: Any) -> McpOutput:
    blocks = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content]
    other = [b for b in blocks if b.get("type") != "text"]
    if result.structuredContent is not None:
        return McpOutput(structured=result.structuredContent, content=other)
    return McpOutput(text=_text(blocks), content=other)


# --- calls and plug-ins ----------------------------------------------------------------------


def _call(
    server: ServerDeclaration,
    name: str,
    arguments: dict[str, Any],
    ctx: ToolContext,
    limit_s: float,
    progress: Progress,
) -> Any:
    """One call: on the worker's long-lived session to a stdio server (``ctx.deps``), else on
    a session of its own."""
    if isinstance(ctx.deps, ServerSession):
        return ctx.deps.call(name, arguments, progress, limit_s)
    return anyio.run(bounded, limit_s, partial(call_tool, server, name, arguments, progress))


# --- tools that answer with a job id (``job`` in their declaration) --------------------------
# The call's result is an Accepted; the declared status and cancel tools of the same server
# follow the job (JobHooks; the reconciler calls them, never a planner).


def _accepted_of(
    declaration: ToolDeclaration, structured: dict[str, Any] | None, where: str
) -> Accepted:
    """The acceptance a job tool's result stands for; a result without the job id is unknown
    (the server may have started a job nobody can follow)."""
    assert declaration.job is not None
    job_id = (structured or {}).get(declaration.job.id_field)
    if not isinstance(job_id, str | int) or isinstance(job_id, bool) or str(job_id) == "":
        raise ToolUnknown(
            f"{where}: the result has no job id ({declaration.job.id_field})",
            code="MCP_JOB_ID_MISSING",
        )
    return Accepted(str(job_id), details=structured)


def _job_hooks(server: ServerDeclaration, declaration: ToolDeclaration) -> JobHooks:
    job = declaration.job
    assert job is not None
    limit = declaration.timeout_s

    def poll(job_id: str, ctx: ToolContext) -> JobStatus:
        result = _call(server, job.status_tool, {job.argument: job_id}, ctx, limit, Progress())
        structured = result.structuredContent or {}
        if result.isError:
            return JobStatus(JobState.RUNNING)  # the status query failed: asked again
        state = str(structured.get(job.state_field, ""))
        if state in job.succeeded:
            return JobStatus(JobState.SUCCEEDED, output={"structured": structured})
        if state in job.failed:
            return JobStatus(JobState.FAILED, code=f"JOB_{state.upper()}"[:64], message=state)
        return JobStatus(JobState.RUNNING)

    def cancel(job_id: str, ctx: ToolContext) -> None:
        assert job.cancel_tool is not None
        _call(server, job.cancel_tool, {job.argument: job_id}, ctx, limit, Progress())

    return JobHooks(
        poll=poll,
        cancel=cancel if job.cancel_tool else None,
        interval_s=job.interval_s,
        max_polls=job.max_polls,
        timeout_s=job.timeout_s,
    )


@dataclass(frozen=True)
class _Executor:
    """Runs one declared tool, the result typed as an outcome."""

    server_name: str
    server: ServerDeclaration
    remote_name: str
    declaration: ToolDeclaration
    definition: McpDefinition | None = None
    """The definition the server served (``None``: the declared registry did not ask)."""

    def __call__(self, args: McpInput, ctx: ToolContext) -> McpOutput | Accepted:
        where = f"MCP {self.server_name}/{self.remote_name}"
        limit = min(self.declaration.timeout_s, ctx.remaining_s()) - _MARGIN_S
        write = self.declaration.side_effect is not SideEffect.READ
        progress = Progress()
        try:
            result = _call(
                self.server, self.remote_name, args.arguments(), ctx, max(limit, 0.01), progress
            )
        except Exception as exc:
            if progress.result is None:
                raise classify(exc, sent=progress.sent, write=write, where=where) from exc
            result = progress.result  # answered; only closing the session failed
        if result.isError:
            blocks = [b.model_dump(mode="json", exclude_none=True) for b in result.content]
            text = _text(blocks) or "the server reported an error"
            raise ToolFailed(f"{where}: {text}"[:MAX_MESSAGE], code="MCP_TOOL_ERROR")
        if self.declaration.job is not None:  # the server took a job: the run waits for it
            return _accepted_of(self.declaration, result.structuredContent, where)
        return _output(result)


# --- a write's postcondition read back from its server (``verify_with``) ----------------------

_MISSING = object()


def _referenced(reference: str, arguments: dict[str, Any], structured: Any) -> Any:
    """The value ``arguments.<name>`` or ``result.<path>`` names (``_MISSING``: none)."""
    where, _, path = reference.partition(".")
    value: Any = arguments if where == "arguments" else structured
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _read_back(server: ServerDeclaration, declaration: ToolDeclaration) -> Any:
    """The contract's ``verify``: the declared read tool called with values from the call;
    the postcondition holds when it answers without error and each ``expect`` field equals
    its value. A read that cannot be made, or names a value the call lacks, does not hold."""
    read: ReadBackDeclaration | None = declaration.verify_with
    assert read is not None

    def verify(args: McpInput, out: McpOutput, ctx: ToolContext) -> bool:
        given, structured = args.arguments(), out.structured or {}
        call = {k: _referenced(ref, given, structured) for k, ref in read.arguments.items()}
        if any(v is _MISSING for v in call.values()):
            return False
        limit = max(min(declaration.timeout_s, ctx.remaining_s()) - _MARGIN_S, 0.01)
        try:
            result = _call(server, read.tool, call, ctx, limit, Progress())
        except Exception:  # not read: the postcondition is not known to hold
            return False
        if result.isError:
            return False
        seen = result.structuredContent or {}
        for field, ref in read.expect.items():
            wanted = _referenced(ref, given, structured)
            if wanted is _MISSING or _referenced(f"result.{field}", {}, seen) != wanted:
                return False
        return True

    return verify


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
            code="MCP_SCHEMA_INVALID",
        ) from exc
    properties = input_model.input_schema.get("properties", {})
    write = decl.side_effect is not SideEffect.READ
    for field in [decl.resource_argument, *decl.sensitive_fields, *decl.secret_fields]:
        if remote.inputSchema is not _NOT_ASKED and field is not None and field not in properties:
            raise config_error(path, f"{where}: {field!r} is not an argument of {remote.name}")
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
        execute=_Executor(server_name, server, remote.name, decl, _definition(server_name, remote)),
        confirmation=decl.confirmation,
        timeout_s=decl.timeout_s,
        resource=_resource(decl.resource_argument),
        sensitive_fields=frozenset(decl.sensitive_fields),
        secret_fields=frozenset(decl.secret_fields),
        output_source=ObservationSource.UNTRUSTED_CONTENT,
        max_attempts=decl.max_attempts,
        job=_job_hooks(server, decl) if decl.job is not None else None,
        verify=_read_back(server, decl) if decl.verify_with is not None else None,
        verify_attempts=decl.verify_with.attempts if decl.verify_with is not None else 1,
        unverified=write and decl.verify_with is None,
        unverified_reason=NO_READ_BACK if write and decl.verify_with is None else "",
    )


def _definition(server_name: str, remote: Any) -> McpDefinition | None:
    return None if isinstance(remote, _Declared) else definition_of(server_name, remote)


def server_tools(path: Path, name: str, server: ServerDeclaration) -> list[Tool[Any, Any]]:
    """Ask ``server`` for its tools once and build a contract for each declared one."""
    source = f"MCP server {name} ({path})"
    try:
        offered = anyio.run(bounded, server.connect_timeout_s, partial(list_tools, server))
    except Exception as exc:
        detail = next((str(x) for x in leaves_of(exc) if str(x)), type(exc).__name__)
        raise ServiceUnavailable(
            f"{source} cannot be reached: {detail}", code="MCP_SERVER_UNAVAILABLE"
        ) from exc
    read_backs = {d.verify_with.tool for d in server.tools.values() if d.verify_with}
    missing = sorted((set(server.tools) | read_backs) - set(offered))
    if missing:
        raise PluginError(
            f"{source} does not offer the declared tool(s) {', '.join(missing)}",
            code="MCP_TOOL_MISSING",
        )
    return [
        _tool(path, name, server, offered[remote], decl) for remote, decl in server.tools.items()
    ]


#: The input schema of a tool whose server was not asked (the declared registry).
_NOT_ASKED: dict[str, Any] = {
    "type": "object",
    "additionalProperties": True,
    "$comment": "declared only: the MCP server was not asked for this tool's inputSchema",
}


@dataclass(frozen=True)
class _Declared:
    """A server tool as the file declares it, standing in for the server's answer."""

    name: str
    inputSchema: dict[str, Any]
    description: str | None = None


def declared_tools(path: Path, name: str, server: ServerDeclaration) -> list[Tool[Any, Any]]:
    """The declared tools of ``server`` without asking it: their policy, an open schema."""
    return [
        _tool(path, name, server, _Declared(remote, _NOT_ASKED), decl)
        for remote, decl in server.tools.items()
    ]


def _session_of(server: ServerDeclaration) -> Any:
    def deps(_ctx: DepsContext) -> ServerSession:
        return ServerSession(server)

    return deps if server.command is not None else None


def mcp_plugins(path: Path, *, ask_servers: bool = True) -> list[Plugin]:
    """One :class:`Plugin` per server of the file, named ``mcp:<server>``; with
    ``ask_servers=False`` no server is contacted (:func:`declared_tools`). Raises
    :class:`PluginError` (``MCP_CONFIG_INVALID``, ``MCP_TOOL_MISSING``,
    ``MCP_SCHEMA_INVALID``) or :class:`ServiceUnavailable` (``MCP_SERVER_UNAVAILABLE``)."""
    config = load_config(path)
    build = server_tools if ask_servers else declared_tools
    return [
        Plugin(
            name=f"mcp:{name}",
            tools=tuple(build(path, name, server)),
            deps=_session_of(server),
            source=f"MCP server {name} ({path})",
        )
        for name, server in config.servers.items()
    ]
