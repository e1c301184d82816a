"""The MCP configuration file ``WARRANT_MCP_CONFIG`` names: which tools of which server warrant
may run, and with what policy (see :mod:`warrant.tools._mcp`)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from warrant.runner.errors import PluginError
from warrant.tools._contract import (
    DEFAULT_JOB_TIMEOUT_S,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_POLLS,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_TOOL_TIMEOUT_S,
    ConfirmationPolicy,
    SideEffect,
)

__all__ = [
    "NO_READ_BACK",
    "JobDeclaration",
    "McpConfig",
    "ReadBackDeclaration",
    "ServerDeclaration",
    "ToolDeclaration",
    "config_error",
    "load_config",
]

_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
Name = Annotated[str, StringConstraints(pattern=_NAME)]
#: A value taken from the call: ``arguments.<name>`` (an argument) or ``result.<path>`` (a
#: field of the call's structured result, dotted for nested).
Reference = Annotated[
    str, StringConstraints(pattern=r"^(arguments|result)\.[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
]
#: The reason an MCP write without ``verify_with`` is unverified.
NO_READ_BACK = "MCP server declares no read-back (verify_with)"


class ReadBackDeclaration(BaseModel):
    """How a write's effect is read back from the same server (its postcondition): a read
    tool called with values from the call, and the fields of its structured result that must
    equal values from the call. The postcondition holds when the read answers without error
    and every ``expect`` field matches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: Name
    """The server tool that reads the effect back (``get_note``)."""
    arguments: dict[str, Reference] = Field(default_factory=dict)
    """Its arguments, each a reference: ``{"title": "arguments.title"}``."""
    expect: dict[str, Reference] = Field(default_factory=dict)
    """Fields of its structured result (dotted for nested) and the value each must equal:
    ``{"body": "arguments.body"}``."""
    attempts: int = Field(default=1, ge=1, le=20)
    """Reads before the postcondition counts as failed (an eventually consistent store)."""


class JobDeclaration(BaseModel):
    """A server tool that answers with a job id and finishes later (a long-running tool,
    ``JobHooks``): where the id is, and the server's tools that follow the job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id_field: str = "job_id"
    """The field of the call's structured result that holds the job id."""
    status_tool: Name
    """The server tool that says how the job stands, called with ``{argument: id}``."""
    cancel_tool: Name | None = None
    """The server tool that cancels a job, called the same way (at most once per job)."""
    argument: str = "job_id"
    state_field: str = "state"
    """The field of the status tool's structured result that holds the job's state."""
    succeeded: list[str] = Field(default_factory=lambda: ["succeeded", "done", "completed"])
    failed: list[str] = Field(default_factory=lambda: ["failed", "cancelled", "error"])
    """Any other state counts as running."""
    interval_s: float = Field(default=DEFAULT_POLL_INTERVAL_S, gt=0, le=3600)
    max_polls: int = Field(default=DEFAULT_MAX_POLLS, ge=1, le=1_000_000)
    timeout_s: float = Field(default=DEFAULT_JOB_TIMEOUT_S, gt=0, le=30 * 24 * 3600)


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
    """Arguments masked in traces and handoff bundles (shown to the approver of the call)."""
    secret_fields: list[str] = Field(default_factory=list)
    """Arguments shown to nobody, the approver included (masked everywhere)."""
    job: JobDeclaration | None = None
    """The tool answers with a job id: the run waits for the job (its status tool polled)."""
    verify_with: ReadBackDeclaration | None = None
    """A write's postcondition: the server tool that reads its effect back. Without it a
    write is ``unverified`` (:data:`NO_READ_BACK`): its success is the server's word."""

    @model_validator(mode="after")
    def _read_back_of_a_write(self) -> Self:
        if self.verify_with is not None and self.side_effect is SideEffect.READ:
            raise ValueError("'verify_with' applies to a write only")
        if self.verify_with is not None and self.job is not None:
            raise ValueError("'verify_with' and 'job' do not go together (the job's status says)")
        return self

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


def config_error(path: Path, message: str) -> PluginError:
    """``MCP_CONFIG_INVALID``, naming the file."""
    return PluginError(f"MCP config {path}: {message}", code="MCP_CONFIG_INVALID")


def load_config(path: Path) -> McpConfig:
    """Read and validate the file; ``PluginError(code="MCP_CONFIG_INVALID")`` names the file
    and each bad field. A relative ``cwd`` is resolved against the file's directory."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except OSError as exc:
        raise config_error(path, f"cannot be read ({exc.strerror or exc})") from exc
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = path.suffix.lstrip(".") or "JSON"
        raise config_error(path, f"is not valid {kind}: {exc}") from exc
    try:
        config = McpConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise config_error(path, problems) from exc
    servers = {
        name: server.model_copy(update={"cwd": path.parent / server.cwd})
        if server.cwd is not None and not server.cwd.is_absolute()
        else server
        for name, server in config.servers.items()
    }
    return McpConfig(servers=servers)
