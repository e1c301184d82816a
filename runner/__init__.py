"""warrant: a message-queue based distributed runner for controlled LLM agents.

The model proposes; the program decides. See ``README.md`` for the flow.

The names of ``__all__`` are imported on first use: the CLI and the workers import
``warrant.runner.<module>`` without paying for the run spec's models or the client.
"""

from __future__ import annotations

__layer__ = "pure core"

import importlib
from typing import TYPE_CHECKING, Any

from warrant._namespace import only_as_warrant

if TYPE_CHECKING:
    from warrant.runner.client.api import Client, RunInfo
    from warrant.runner.client.contract import RunnerClient
    from warrant.runner.codes import ErrorCode, Outcome, Rejection, RunStatus, StopReason
    from warrant.runner.errors import (
        BrokerUnavailable,
        ConfirmationRefused,
        HandoffNotFound,
        InvalidRequest,
        NotFound,
        RunNotFound,
        ServiceUnavailable,
        SpecError,
        StateConflict,
        ToolError,
        ToolFailed,
        ToolRejected,
        ToolUnknown,
        Unauthorized,
        WarrantError,
    )
    from warrant.runner.spec import Budgets, Grant, RunSpec, parse_run_spec

#: Where each public name lives. The client needs the ledger and the broker; the pure core
#: imports neither, so it is only imported when asked for.
_SOURCES = {
    **dict.fromkeys(("ErrorCode", "Outcome", "Rejection", "RunStatus", "StopReason"), "codes"),
    **dict.fromkeys(
        (
            "BrokerUnavailable",
            "ConfirmationRefused",
            "HandoffNotFound",
            "InvalidRequest",
            "NotFound",
            "RunNotFound",
            "ServiceUnavailable",
            "SpecError",
            "StateConflict",
            "ToolError",
            "ToolFailed",
            "ToolRejected",
            "ToolUnknown",
            "Unauthorized",
            "WarrantError",
        ),
        "errors",
    ),
    **dict.fromkeys(("Budgets", "Grant", "RunSpec", "parse_run_spec"), "spec"),
    **dict.fromkeys(("Client", "RunInfo"), "client.api"),
    "RunnerClient": "client.contract",
}


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'warrant.runner' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"warrant.runner.{source}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BrokerUnavailable",
    "Budgets",
    "Client",
    "ConfirmationRefused",
    "ErrorCode",
    "Grant",
    "HandoffNotFound",
    "InvalidRequest",
    "NotFound",
    "Outcome",
    "Rejection",
    "RunInfo",
    "RunNotFound",
    "RunSpec",
    "RunStatus",
    "RunnerClient",
    "ServiceUnavailable",
    "SpecError",
    "StateConflict",
    "StopReason",
    "ToolError",
    "ToolFailed",
    "ToolRejected",
    "ToolUnknown",
    "Unauthorized",
    "WarrantError",
    "parse_run_spec",
]

only_as_warrant(__name__, "runner")  # a bare `import runner` from the repository root fails here
