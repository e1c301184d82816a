"""warrant: a message-queue based distributed runner for controlled LLM agents.

The model proposes; the program decides. See ``README.md`` for the flow.
"""

from runner.api import Client, RunInfo
from runner.codes import Outcome, Rejection, RunStatus, StopReason
from runner.errors import (
    RunNotFound,
    ServiceUnavailable,
    SpecError,
    StateConflict,
    ToolError,
    ToolFailed,
    ToolRejected,
    ToolUnknown,
    WarrantError,
)
from runner.spec import Budgets, Grant, RunSpec, parse_run_spec

__all__ = [
    "Budgets",
    "Client",
    "Grant",
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
    "WarrantError",
    "parse_run_spec",
]
