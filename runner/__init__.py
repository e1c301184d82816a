"""warrant: a message-queue based distributed runner for controlled LLM agents.

The model proposes; the program decides. See ``README.md`` for the flow.
"""

from typing import TYPE_CHECKING, Any

from warrant.runner.codes import Outcome, Rejection, RunStatus, StopReason
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

if TYPE_CHECKING:
    from warrant.runner.client.api import Client, RunInfo


def __getattr__(name: str) -> Any:
    # The client needs the ledger and the broker; the pure core must import neither.
    if name in ("Client", "RunInfo"):
        from warrant.runner.client import api

        return getattr(api, name)
    raise AttributeError(name)


__all__ = [
    "BrokerUnavailable",
    "Budgets",
    "Client",
    "ConfirmationRefused",
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
