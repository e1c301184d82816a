"""The one rooted error tree of warrant.

Everything warrant raises on purpose derives from :class:`WarrantError` and carries a stable
``code``, a member of :class:`warrant.runner.codes.ErrorCode` (the class default, or a finer
one given at the raise site). The tree::

    WarrantError                    WARRANT_ERROR
    ├── InvalidRequest              INVALID_REQUEST      bad input that no run state could fix
    │   │                           (UNKNOWN_ROLE, UNKNOWN_TOOL, INVALID_RESOLUTION,
    │   │                           RESOLUTION_IDENTITY_REQUIRED, ARGUMENTS_NOT_JSON,
    │   │                           USAGE_ERROR: a command line click/typer refused,
    │   │                           DURATION_INVALID: ``run grant --for``, …)
    │   ├── InvalidChoice           INVALID_CHOICE       a value outside a fixed set; ``valid``
    │   │                                                lists the set (STATUS_INVALID)
    │   ├── IdAmbiguous             ID_AMBIGUOUS         an id prefix that several ids share
    │   ├── InvalidResource         RESOURCE_INVALID     no valid value of its resource kind
    │   └── InvalidScope            SCOPE_INVALID        no valid scope of its resource kind
    │                               (both warrant.runner.scopes)
    ├── SettingsInvalid             SETTINGS_INVALID     a WARRANT_* setting that cannot be read
    │                                                    (not a number, not a database URL, …)
    ├── SpecError                   SPEC_INVALID         a run spec failed validation
    ├── NotFound                    NOT_FOUND            no such object
    │   ├── RunNotFound             RUN_NOT_FOUND        no run with that id
    │   ├── HandoffNotFound         HANDOFF_NOT_FOUND    no handoff with that id (or for that run)
    │   └── MemoryNotFound          MEMORY_NOT_FOUND     no long-term memory record with that id
    ├── StateConflict               STATE_CONFLICT       the request does not fit the run's state
    │   │                           (RUN_NOT_CANCELLABLE, HANDOFF_ALREADY_RESOLVED,
    │   │                           GRANT_WIDENING_REFUSED: an operator's grant wider than a
    │   │                           standing one, without widen)
    │   ├── RunFinished             RUN_FINISHED         a grant or pre-approval for a run that
    │   │                                                is completed, failed or cancelled
    │   ├── StaleVersion            STALE_VERSION        a compare-and-set on the run version
    │   │                                                lost (warrant.ledger.repo; hot path)
    │   ├── IllegalTransition       ILLEGAL_TRANSITION   a status change the run state machine
    │   │                                                does not declare (a bug; run_machine)
    │   └── SweepLockLost           SWEEP_LOCK_LOST      a reconciler sweep's exclusion ended
    │                                                    under it (warrant.ledger.sweeps)
    ├── ServiceUnavailable          SERVICE_UNAVAILABLE  Redis, RabbitMQ or PostgreSQL cannot be
    │   │                           reached or is not configured (SERVICES_NOT_CONFIGURED,
    │   │                           DATABASE_UNAVAILABLE, MIGRATION_STATE_UNREADABLE,
    │   │                           STACK_ALREADY_RUNNING, WORKER_START_FAILED,
    │   │                           MCP_SERVER_UNAVAILABLE: an MCP server asked for its tools, …)
    │   └── BrokerUnavailable       BROKER_UNAVAILABLE   a message could not be published
    │                               (``run_id`` names its run, recorded in the ledger: the
    │                               stall sweep publishes it later)
    ├── WaitTimedOut                WAIT_TIMED_OUT       a wait's deadline passed while the
    │                               ledger or the broker gave no answer (CLI exit 5)
    ├── LedgerTampered              LEDGER_TAMPERED      ``ledger verify`` found a broken link in
    │                               the trace's hash chain or a prune anchor (``run_id``,
    │                               ``seq``, ``kind``; warrant.ledger.chain)
    ├── ConfirmationRefused         CONFIRMATION_REFUSED a confirm/decline that does not fit the
    │                               pending request (RUN_NOT_WAITING_CONFIRMATION, …)
    ├── Unauthorized                OPERATOR_TOKEN_INVALID  an operator call without a valid token
    │   ├── TokenInvalid            TOKEN_INVALID        an API token that is missing, unknown or
    │   │                                                revoked (warrant.runner.client.tokens)
    │   └── Forbidden               FORBIDDEN            a known identity whose role may not do
    │                                                    that action (warrant.runner.authz;
    │                                                    OWN_RUN_APPROVAL_FORBIDDEN)
    ├── PluginError                 PLUGIN_LOAD_FAILED   a tool/planner plug-in could not be
    │                               loaded, or two clash (TOOL_CONFLICT, MCP_CONFIG_INVALID,
    │                               MCP_TOOL_MISSING, MCP_SCHEMA_INVALID, …)
    ├── PlannerFailure              PLANNER_FAILED       the planner produced nothing usable
    │   │                           (warrant.runner.step_decisions; MODEL_UNREACHABLE, …)
    │   └── PlannerRetryLater       PLANNER_RETRY_LATER  ask again after a delay (429, 5xx):
    │                               the step is re-published with a countdown (runner.retry)
    └── ToolError                   TOOL_ERROR           raised *by tool code* for a typed outcome
        ├── ToolRejected            TOOL_REJECTED        valid input, business or permission refusal
        │   └── ToolPermissionDenied TOOL_PERMISSION_DENIED the external system refused for a
        │                           permission (``capability``, ``resource``): with
        │                           ``on_missing_grant: ask`` the run waits for a grant
        ├── ToolFailed              TOOL_FAILED          known not applied; ``retryable`` says if a
        │                                                retry may help
        └── ToolUnknown             TOOL_OUTCOME_UNKNOWN may have taken effect; only
                                                         reconciliation can tell

The CLI maps classes to exit codes: ``InvalidRequest``, ``SpecError``, ``NotFound``,
``StateConflict``, ``ConfirmationRefused``, ``Unauthorized``, ``PluginError`` and
``SettingsInvalid`` exit 2 (bad input), ``ServiceUnavailable`` exits 3, ``WaitTimedOut`` 5,
anything else 1.
``--json`` returns ``code``; the message is for people and may change.
``tests/unit/test_errors.py`` checks that every exception class defined in ``warrant.*`` is in
this tree and has a code.
"""

from __future__ import annotations

__layer__ = "codes and errors"

from typing import Any

from warrant.runner.codes import ErrorCode

__all__ = [
    "BrokerUnavailable",
    "ConfirmationRefused",
    "Forbidden",
    "HandoffNotFound",
    "IdAmbiguous",
    "InvalidChoice",
    "InvalidRequest",
    "LedgerTampered",
    "MemoryNotFound",
    "NotFound",
    "PluginError",
    "RunFinished",
    "RunNotFound",
    "ServiceUnavailable",
    "SettingsInvalid",
    "SpecError",
    "StateConflict",
    "TokenInvalid",
    "ToolError",
    "ToolFailed",
    "ToolPermissionDenied",
    "ToolRejected",
    "ToolUnknown",
    "Unauthorized",
    "WaitTimedOut",
    "WarrantError",
]


class WarrantError(Exception):
    """Base of every error warrant raises on purpose."""

    code: str = ErrorCode.WARRANT_ERROR
    dict_fields: tuple[str, ...] = ()
    """The attributes :meth:`to_dict` gives after the code and the message."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, Any]:
        extra = {name: getattr(self, name) for name in self.dict_fields}
        return {"code": self.code, "message": str(self), **extra}


class SpecError(WarrantError):
    """A run spec is not valid; ``errors`` lists ``{"field", "message"}`` items."""

    code: str = ErrorCode.SPEC_INVALID
    dict_fields = ("errors",)

    def __init__(self, message: str, *, errors: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.errors = errors


class InvalidRequest(WarrantError):
    code: str = ErrorCode.INVALID_REQUEST


class InvalidChoice(InvalidRequest):
    """A value outside a fixed set (a ``--status`` filter, …): ``valid`` lists the set, so a
    caller can correct itself without reading the message."""

    code: str = ErrorCode.INVALID_CHOICE
    dict_fields = ("valid",)

    def __init__(self, message: str, *, valid: list[str], code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.valid = valid


class IdAmbiguous(InvalidRequest):
    """An id prefix that more than one id starts with: ``matches`` names some of them (a
    longer prefix picks one)."""

    code: str = ErrorCode.ID_AMBIGUOUS
    dict_fields = ("matches",)

    def __init__(self, message: str, *, matches: list[str]) -> None:
        super().__init__(message)
        self.matches = matches


class SettingsInvalid(WarrantError):
    """A ``WARRANT_*`` setting that cannot be used (pydantic refused it, or the database URL
    does not parse): the deployment's fault, not the request's, so a server answers 500.
    ``warrant.runner.settings.load_settings`` raises it as a process starts."""

    code: str = ErrorCode.SETTINGS_INVALID


class NotFound(WarrantError):
    code: str = ErrorCode.NOT_FOUND


class RunNotFound(NotFound):
    code: str = ErrorCode.RUN_NOT_FOUND


class HandoffNotFound(NotFound):
    code: str = ErrorCode.HANDOFF_NOT_FOUND


class MemoryNotFound(NotFound):
    code: str = ErrorCode.MEMORY_NOT_FOUND


class StateConflict(WarrantError):
    code: str = ErrorCode.STATE_CONFLICT


class RunFinished(StateConflict):
    """The run is completed, failed or cancelled: a grant or pre-approval could never be used
    (it would only sit in the ledger as if it mattered)."""

    code: str = ErrorCode.RUN_FINISHED


class ServiceUnavailable(WarrantError):
    code: str = ErrorCode.SERVICE_UNAVAILABLE


class BrokerUnavailable(ServiceUnavailable):
    """What the unpublished message continues is already committed: the stalled-run sweep
    re-publishes it once the broker is back (after ``WARRANT_STALL_AFTER_S``)."""

    code: str = ErrorCode.BROKER_UNAVAILABLE
    dict_fields = ("run_id",)

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class WaitTimedOut(WarrantError):
    """``run start --wait`` or ``run wait`` timed out on a silent ledger or broker: the
    command exits 5 as a wait that timed out does; the run, if recorded, goes on."""

    code: str = ErrorCode.WAIT_TIMED_OUT


class ConfirmationRefused(WarrantError):
    code: str = ErrorCode.CONFIRMATION_REFUSED


class Unauthorized(WarrantError):
    code: str = ErrorCode.OPERATOR_TOKEN_INVALID


class TokenInvalid(Unauthorized):
    code: str = ErrorCode.TOKEN_INVALID


class Forbidden(Unauthorized):
    code: str = ErrorCode.FORBIDDEN


class PluginError(WarrantError):
    code: str = ErrorCode.PLUGIN_LOAD_FAILED


class ToolError(WarrantError):
    """Raised inside a tool to report a typed, non-success outcome."""

    code: str = ErrorCode.TOOL_ERROR


class ToolRejected(ToolError):
    code: str = ErrorCode.TOOL_REJECTED

    @property
    def details(self) -> dict[str, Any] | None:
        """Structured facts for the planner (e.g. a conflict's current value)."""
        return None


class ToolPermissionDenied(ToolRejected):
    """The external system refused the call for a permission the run's identity lacks there
    (an HTTP 403, "not allowed"): ``capability`` names that permission, ``resource`` what it
    is on. The code is always ``TOOL_PERMISSION_DENIED``. By default the planner sees it as
    any refusal (``details`` carries both); with the run spec's ``policy.on_missing_grant:
    "ask"`` the run waits in ``waiting_grant`` for an operator, who fixes the access and
    grants, and the same proposal is checked and executed again (docs/refusals-that-ask.md).
    Raise it only when nothing was applied."""

    code: str = ErrorCode.TOOL_PERMISSION_DENIED

    def __init__(self, message: str, *, capability: str, resource: str | None = None) -> None:
        super().__init__(message)
        self.capability = capability
        self.resource = resource

    @property
    def details(self) -> dict[str, Any] | None:
        return {"capability": self.capability, "resource": self.resource}

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), **(self.details or {})}


class ToolFailed(ToolError):
    """Known not applied. ``retryable`` and ``retry_after_s`` drive the retry policy."""

    code: str = ErrorCode.TOOL_FAILED

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
    code: str = ErrorCode.TOOL_OUTCOME_UNKNOWN


class ToolInterrupted(ToolError):
    """The worker interrupted the call (its run is being cancelled, its deadline passed, or
    its lease could not be renewed), raised by the blocking helpers a tool calls
    (``ToolContext.sleep``, ``warrant.tools.blocking``). Typed like a time limit's
    interruption: a read fails, a write's effect is unknown."""

    code: str = ErrorCode.TOOL_INTERRUPTED


class LedgerTampered(WarrantError):
    """``kind`` of the first broken link: ``edited``, ``deleted``, ``reordered``,
    ``inserted``, ``row_edited`` (a decision row: ``table`` and ``key`` say which),
    ``anchor_mismatch`` or ``anchor_missing``."""

    code: str = ErrorCode.LEDGER_TAMPERED

    def __init__(self, message: str, *, found: dict[str, Any]) -> None:
        super().__init__(message)
        self.found = found

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), **self.found}
