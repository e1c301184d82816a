"""The one rooted error tree of warrant.

    WarrantError
    ├── SpecError                 a run spec failed validation (``code`` = ``SPEC_INVALID``)
    ├── RunNotFound               no run with that id (``RUN_NOT_FOUND``)
    ├── StateConflict             a compare-and-set on the run version lost (``STATE_CONFLICT``)
    ├── ServiceUnavailable        Redis, RabbitMQ or PostgreSQL cannot be reached
    │   └── BrokerUnavailable     a message could not be published (``run_id`` names its run,
    │                             recorded in the ledger: the stall sweep publishes it later)
    ├── ConfirmationRefused       a confirm/decline that does not fit the pending request
    ├── Unauthorized              an operator call without a valid operator token
    ├── PluginError               a tool/planner plug-in could not be loaded, or two clash
    └── ToolError                 raised *by tool code* to report a typed outcome
        ├── ToolRejected          valid input, business or permission refusal
        ├── ToolFailed            known not applied; ``retryable`` says if a retry may help
        └── ToolUnknown           may have taken effect; only reconciliation can tell

Every error carries a stable ``code`` that the CLI prints and ``--json`` returns; the
message is for people and may change.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BrokerUnavailable",
    "ConfirmationRefused",
    "PluginError",
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
]


class WarrantError(Exception):
    """Base of every error warrant raises on purpose."""

    code: str = "WARRANT_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self)}


class SpecError(WarrantError):
    """A run spec is not valid; ``errors`` lists ``{"field", "message"}`` items."""

    code = "SPEC_INVALID"

    def __init__(self, message: str, *, errors: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.errors = errors

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "errors": self.errors}


class RunNotFound(WarrantError):
    code = "RUN_NOT_FOUND"


class StateConflict(WarrantError):
    code = "STATE_CONFLICT"


class ServiceUnavailable(WarrantError):
    code = "SERVICE_UNAVAILABLE"


class BrokerUnavailable(ServiceUnavailable):
    """The broker could not be reached to publish a message of run ``run_id``. What the
    message continues is already committed: the reconciler's stalled-run sweep re-publishes
    it once the broker is back (after ``WARRANT_STALL_AFTER_S``)."""

    code = "BROKER_UNAVAILABLE"

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "run_id": self.run_id}


class ConfirmationRefused(WarrantError):
    """``RUN_NOT_WAITING_CONFIRMATION``, ``CONFIRMATION_HASH_MISMATCH``,
    ``CONFIRMATION_EXPIRED``."""

    code = "CONFIRMATION_REFUSED"


class Unauthorized(WarrantError):
    code = "OPERATOR_TOKEN_INVALID"


class PluginError(WarrantError):
    """``PLUGIN_LOAD_FAILED`` (an import or object that is not a tool source),
    ``TOOL_CONFLICT`` (one name and version from two sources), ``PLANNER_CONFLICT``,
    ``MCP_CONFIG_INVALID``, ``MCP_SERVER_UNAVAILABLE``."""

    code = "PLUGIN_LOAD_FAILED"


class ToolError(WarrantError):
    """Raised inside a tool to report a typed, non-success outcome."""

    code = "TOOL_ERROR"


class ToolRejected(ToolError):
    code = "TOOL_REJECTED"

    @property
    def details(self) -> dict[str, Any] | None:
        """Structured facts for the planner (e.g. a conflict's current value)."""
        return None


class ToolFailed(ToolError):
    """Known not applied. ``retryable`` and ``retry_after_s`` drive the retry policy."""

    code = "TOOL_FAILED"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool = False,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class ToolUnknown(ToolError):
    code = "TOOL_OUTCOME_UNKNOWN"
