"""warrant: a message-queue based distributed runner for controlled LLM agents.

One import namespace for the design card's folders: ``warrant.runner`` (the domain, the
client and the CLI), ``warrant.tools`` (the tool contract, the registry, built-in tools),
``warrant.broker`` (Celery app, queues, worker roles) and ``warrant.ledger`` (the PostgreSQL
ledger).

The public API is pinned in ``__all__``: the client, the run spec, the codes and the error
tree from :mod:`warrant.runner`, and what a tool author needs from :mod:`warrant.tools`. Each
name is imported on first use, so ``import warrant`` (and the CLI's start-up) stays cheap.

Two more public faces, imported by their own path: :mod:`warrant.testing` (test a tool in
process: the gate's verdict and the outcome the workers would record) and
:mod:`warrant.contrib` (the OpenAI Agents SDK and pydantic-ai adapters, optional extras).
``tests/unit/test_public_api.py`` pins all of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warrant.runner import (
        BrokerUnavailable,
        Budgets,
        Client,
        ConfirmationRefused,
        ErrorCode,
        Grant,
        HandoffNotFound,
        InvalidRequest,
        NotFound,
        Outcome,
        Rejection,
        RunInfo,
        RunnerClient,
        RunNotFound,
        RunSpec,
        RunStatus,
        ServiceUnavailable,
        SpecError,
        StateConflict,
        StopReason,
        ToolError,
        ToolFailed,
        ToolRejected,
        ToolUnknown,
        Unauthorized,
        WarrantError,
        parse_run_spec,
    )
    from warrant.tools import (
        Accepted,
        Attribution,
        Batch,
        ConfirmationPolicy,
        DepsContext,
        FlagAction,
        Isolation,
        ItemResult,
        ItemStatus,
        JobHooks,
        JobState,
        JobStatus,
        ObservationSource,
        OnError,
        Plugin,
        PreconditionContext,
        ReconcileResult,
        ResourceKind,
        SideEffect,
        Tool,
        ToolContext,
        ToolInput,
        ToolInterrupted,
        ToolOutput,
        ToolPermissionDenied,
        UntrustedPolicy,
    )

#: Which module each public name comes from (checked against both modules' ``__all__``).
#: The runner's names come from its own table (``warrant.runner._SOURCES``: that package
#: imports nothing at import time, so reading it costs nothing).
_RUNNER_SOURCES: dict[str, str] = {
    name: f"warrant.runner.{module}"
    for name, module in importlib.import_module("warrant.runner")._SOURCES.items()
}
_TOOLS_NAMES = (
    "Accepted",
    "Attribution",
    "Batch",
    "ItemResult",
    "ItemStatus",
    "JobHooks",
    "JobState",
    "JobStatus",
    "ObservationSource",
    "ResourceKind",
    "ConfirmationPolicy",
    "DepsContext",
    "FlagAction",
    "Isolation",
    "OnError",
    "Plugin",
    "PreconditionContext",
    "ReconcileResult",
    "SideEffect",
    "Tool",
    "ToolContext",
    "ToolInput",
    "ToolInterrupted",
    "ToolOutput",
    "ToolPermissionDenied",
    "UntrustedPolicy",
)
_SOURCES = _RUNNER_SOURCES | {name: "warrant.tools" for name in _TOOLS_NAMES}

__all__ = [
    "Accepted",
    "Attribution",
    "Batch",
    "BrokerUnavailable",
    "Budgets",
    "Client",
    "ConfirmationPolicy",
    "ConfirmationRefused",
    "DepsContext",
    "ErrorCode",
    "FlagAction",
    "Grant",
    "HandoffNotFound",
    "InvalidRequest",
    "Isolation",
    "ItemResult",
    "ItemStatus",
    "JobHooks",
    "JobState",
    "JobStatus",
    "NotFound",
    "ObservationSource",
    "OnError",
    "Outcome",
    "Plugin",
    "PreconditionContext",
    "ReconcileResult",
    "Rejection",
    "ResourceKind",
    "RunInfo",
    "RunNotFound",
    "RunSpec",
    "RunStatus",
    "RunnerClient",
    "ServiceUnavailable",
    "SideEffect",
    "SpecError",
    "StateConflict",
    "StopReason",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolFailed",
    "ToolInput",
    "ToolInterrupted",
    "ToolOutput",
    "ToolPermissionDenied",
    "ToolRejected",
    "ToolUnknown",
    "Unauthorized",
    "UntrustedPolicy",
    "WarrantError",
    "__version__",
    "parse_run_spec",
]


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("warrant-runner")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from an unbuilt tree
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":  # importlib.metadata costs a CLI command's start-up otherwise
        globals()[name] = version = _version()
        return version
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'warrant' has no attribute {name!r}")
    # importlib, not ``from warrant import runner``: that form asks this very __getattr__ for
    # the submodule before it is imported, and recursed.
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
