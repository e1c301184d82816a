"""The one rooted error tree of warrant.

Everything warrant raises on purpose derives from :class:`WarrantError` and carries a stable
``code`` (the class default, or a finer one given at the raise site). The tree::

    WarrantError                    WARRANT_ERROR
    ├── InvalidRequest              INVALID_REQUEST      bad input that no run state could fix
    │   │                           (UNKNOWN_ROLE, UNKNOWN_TOOL, INVALID_RESOLUTION,
    │   │                           RESOLUTION_IDENTITY_REQUIRED, ARGUMENTS_NOT_JSON, …)
    │   ├── InvalidResource         RESOURCE_INVALID     no valid value of its resource kind
    │   └── InvalidScope            SCOPE_INVALID        no valid scope of its resource kind
    │                               (both warrant.runner.scopes)
    ├── SpecError                   SPEC_INVALID         a run spec failed validation
    ├── NotFound                    NOT_FOUND            no such object
    │   ├── RunNotFound             RUN_NOT_FOUND        no run with that id
    │   ├── HandoffNotFound         HANDOFF_NOT_FOUND    no handoff with that id (or for that run)
    │   └── MemoryNotFound          MEMORY_NOT_FOUND     no long-term memory record with that id
    ├── StateConflict               STATE_CONFLICT       the request does not fit the run's state
    │   │                           (RUN_NOT_CANCELLABLE, HANDOFF_ALREADY_RESOLVED)
    │   ├── StaleVersion            STALE_VERSION        a compare-and-set on the run version
    │   │                                                lost (warrant.ledger.repo; hot path)
    │   └── IllegalTransition       ILLEGAL_TRANSITION   a status change the run state machine
    │                                                    does not declare (a bug; run_rules)
    ├── ServiceUnavailable          SERVICE_UNAVAILABLE  Redis, RabbitMQ or PostgreSQL cannot be
    │   │                           reached or is not configured (SERVICES_NOT_CONFIGURED,
    │   │                           DATABASE_UNAVAILABLE, MIGRATION_STATE_UNREADABLE,
    │   │                           STACK_ALREADY_RUNNING, WORKER_START_FAILED, …)
    │   └── BrokerUnavailable       BROKER_UNAVAILABLE   a message could not be published
    │                               (``run_id`` names its run, recorded in the ledger: the
    │                               stall sweep publishes it later)
    ├── ConfirmationRefused         CONFIRMATION_REFUSED a confirm/decline that does not fit the
    │                               pending request (RUN_NOT_WAITING_CONFIRMATION, …)
    ├── Unauthorized                OPERATOR_TOKEN_INVALID  an operator call without a valid token
    │   ├── TokenInvalid            TOKEN_INVALID        an API token that is missing, unknown or
    │   │                                                revoked (warrant.runner.client.tokens)
    │   └── Forbidden               FORBIDDEN            a known identity whose role may not do
    │                                                    that action (warrant.runner.authz;
    │                                                    OWN_RUN_APPROVAL_FORBIDDEN)
    ├── PluginError                 PLUGIN_LOAD_FAILED   a tool/planner plug-in could not be
    │                               loaded, or two clash (TOOL_CONFLICT, …)
    ├── PlannerFailure              PLANNER_FAILED       the planner produced nothing usable
    │                               (warrant.runner.step_decisions; MODEL_UNREACHABLE, …)
    └── ToolError                   TOOL_ERROR           raised *by tool code* for a typed outcome
        ├── ToolRejected            TOOL_REJECTED        valid input, business or permission refusal
        ├── ToolFailed              TOOL_FAILED          known not applied; ``retryable`` says if a
        │                                                retry may help
        └── ToolUnknown             TOOL_OUTCOME_UNKNOWN may have taken effect; only
                                                         reconciliation can tell

The CLI maps classes to exit codes: ``InvalidRequest``, ``SpecError``, ``NotFound``,
``StateConflict``, ``ConfirmationRefused``, ``Unauthorized`` and ``PluginError`` exit 2 (bad
input), ``ServiceUnavailable`` exits 3, anything else 1. ``--json`` returns ``code``; the
message is for people and may change. ``tests/unit/test_errors.py`` checks that every exception
class defined in ``warrant.*`` is in this tree and has a code.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BrokerUnavailable",
    "ConfirmationRefused",
    "Forbidden",
    "HandoffNotFound",
    "InvalidRequest",
    "MemoryNotFound",
    "NotFound",
    "PluginError",
    "RunNotFound",
    "ServiceUnavailable",
    "SpecError",
    "StateConflict",
    "TokenInvalid",
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


class InvalidRequest(WarrantError):
    """Bad input: an unknown role or tool, an argument out of its allowed values."""

    code = "INVALID_REQUEST"


class NotFound(WarrantError):
    """The object a request names does not exist."""

    code = "NOT_FOUND"


class RunNotFound(NotFound):
    code = "RUN_NOT_FOUND"


class HandoffNotFound(NotFound):
    code = "HANDOFF_NOT_FOUND"


class MemoryNotFound(NotFound):
    code = "MEMORY_NOT_FOUND"


class StateConflict(WarrantError):
    """The request does not fit the run's current state (or lost a race for it)."""

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


class TokenInvalid(Unauthorized):
    """No API token, or one that is unknown or revoked (who is calling is not known)."""

    code = "TOKEN_INVALID"


class Forbidden(Unauthorized):
    """The caller is known, but its role may not do that action (or, with
    ``OWN_RUN_APPROVAL_FORBIDDEN``, not on a run it started itself)."""

    code = "FORBIDDEN"


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
