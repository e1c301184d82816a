"""The HTTP API's request and response bodies (pydantic; they make the OpenAPI document).

Every string a request carries is refused (``REQUEST_INVALID``) if it holds a NUL character or
a lone surrogate: PostgreSQL stores neither, and bad input must never become a server error.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    model_validator,
)

from warrant.runner.client.inbox import PendingConfirmation, Revealed
from warrant.runner.client.replays import MAX_DIFF_RUNS
from warrant.runner.client.run_info import RunInfo
from warrant.runner.spec import DestinationSource

__all__ = [
    "INT32_MAX",
    "AnswerIn",
    "BudgetsOut",
    "CancelIn",
    "ConfirmationsOut",
    "DecisionIn",
    "DecisionOut",
    "ErrorBody",
    "ErrorDetail",
    "ForkIn",
    "GrantIn",
    "GrantOut",
    "HandoffPage",
    "Health",
    "IdentityOut",
    "MemoryRecordsOut",
    "MemoryRevokedOut",
    "ObservationsOut",
    "PolicyApprovalIn",
    "PolicyApprovalOut",
    "PolicyDiffIn",
    "PolicyDiffOut",
    "PolicyOut",
    "PreApprovalIn",
    "PreApprovalOut",
    "ReplayIn",
    "ReplayOut",
    "ResolveIn",
    "RevealedOut",
    "RunOut",
    "RunPage",
    "ToolSwitchIn",
    "ToolSwitchOut",
    "TraceEventOut",
    "TraceOut",
    "bad_text",
    "record_model",
]

#: The largest value an ``integer`` column holds (steps, uses, versions).
INT32_MAX = 2**31 - 1


def bad_text(value: Any) -> str | None:
    """Where ``value`` (any JSON value) holds a string PostgreSQL cannot store: a short
    description, or ``None`` if there is none. Walked without recursion: a body nested
    deeper than Python's recursion limit is checked like any other."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "NUL characters are not allowed"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "text must be valid Unicode (no lone surrogates)"
        elif isinstance(item, dict):
            stack.extend(reversed([*item.keys(), *item.values()]))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
    return None


def _storable(value: str) -> str:
    problem = bad_text(value)
    if problem:
        raise ValueError(problem)
    return value


Text = Annotated[str, AfterValidator(_storable)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _storable_values(self) -> _In:
        problem = bad_text(self.model_dump(mode="python"))
        if problem:
            raise ValueError(problem)
        return self


# --- errors ----------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="Stable error code (e.g. RUN_NOT_FOUND, FORBIDDEN).")
    message: str = Field(description="For people; may change.")
    errors: list[dict[str, Any]] | None = Field(
        default=None,
        description="Field errors ({field, message}) of SPEC_INVALID and REQUEST_INVALID.",
    )
    run_id: str | None = Field(
        default=None, description="BROKER_UNAVAILABLE: the run that was recorded anyway."
    )


class ErrorBody(BaseModel):
    """Every error: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


# --- runs ------------------------------------------------------------------------------------


def record_model(
    record: type,
    name: str,
    doc: str,
    *,
    described: dict[str, str] | None = None,
    required: frozenset[str] = frozenset(),
    extra: dict[str, Any] | None = None,
) -> type[BaseModel]:
    """A response model derived from the client's record (a dataclass): its fields, types and
    defaults, never declared twice; ``described`` documents fields for the OpenAPI document,
    ``required`` drops a default, ``extra`` adds fields (``(type, FieldInfo)``)."""
    hints = typing.get_type_hints(record)
    described = described or {}
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.name in required or (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ):
            info = Field(description=described.get(f.name))
        elif f.default_factory is not dataclasses.MISSING:
            info = Field(default_factory=f.default_factory, description=described.get(f.name))
        else:
            info = Field(default=f.default, description=described.get(f.name))
        fields[f.name] = (hints[f.name], info)
    model: type[BaseModel] = create_model(name, __doc__=doc, **fields, **(extra or {}))
    model.__module__ = __name__
    return model


if TYPE_CHECKING:

    class RevealedOut(BaseModel): ...

    class RunOut(BaseModel):
        revealed: RevealedOut | None

else:
    RevealedOut = record_model(
        Revealed,
        "RevealedOut",
        "The pending proposal's arguments as they will run: what ``?reveal=true`` adds for a "
        "token whose role may confirm (traced on the run as ``sensitive.revealed``).",
        described={
            "proposal_hash": "The proposal these values belong to "
            "(confirmation_request.proposal_hash).",
            "arguments": "Every argument with its value, sensitive ones included; a "
            'secret_fields value stays "<secret>" (shown to nobody).',
            "fields": "The sensitive fields whose values are shown.",
        },
    )
    RunOut = record_model(
        RunInfo,
        "RunOut",
        "A run's state, as ``warrant run show --json`` prints it.",
        described={
            "status": "running, waiting_confirmation, waiting_grant, needs_input, completed, …",
            "stop_reason": "Why the run stopped (a stable code).",
            "version": "Raised by one at every change (for /wait?version=).",
            "created_at": "ISO 8601 time.",
            "confirmation_request": "While waiting_confirmation: what is to be approved, with "
            "proposal_hash.",
            "waiting_for_grant": "While waiting_grant: tool, tool_version, capability, "
            "capabilities, resources, step, proposal_id, proposal_hash, code "
            "(MISSING_CAPABILITY or RESOURCE_OUT_OF_SCOPE: source gate; "
            "TOOL_PERMISSION_DENIED: source tool, with the tool's message, command_id and "
            "attempt). POST /v1/runs/{run_id}/grants resumes it.",
            "idempotency_key": "The key it was started with.",
            "started_by": "Who started it (token label).",
            "trace_id": "The run's OpenTelemetry trace id (32 hex digits), if traced: one "
            "trace for the whole run.",
            "tokens_used": "Tokens charged: model calls (reported or estimated) and tools.",
            "cost_used": "Cost charged, likewise (max_cost).",
            "budget_stop": "For a run stopped by a budget (MAX_*_REACHED, DEADLINE_REACHED): "
            "artifacts (what it had already made: each succeeded effect's command_id, tool, "
            "step, output ids and fields) and the budget snapshot when it stopped.",
        },
        extra={
            "revealed": (
                RevealedOut | None,
                Field(
                    default=None,
                    description="Only for GET /v1/runs/{run_id}?reveal=true by a token that "
                    "may confirm (approver, operator), while the run waits for a "
                    "confirmation: the values that confirmation_request masks as "
                    "<sensitive>. Each reveal is a sensitive.revealed trace event. Null "
                    "otherwise.",
                ),
            )
        },
    )


class RunPage(BaseModel):
    runs: list[RunOut] = Field(description="Newest first.")
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next page; null on the last page."
    )


class TraceEventOut(BaseModel):
    seq: int
    event: str
    step: int
    proposal_id: str | None
    details: dict[str, Any] | None
    at: str = Field(description="ISO 8601 time.")


class TraceOut(BaseModel):
    run_id: str
    events: list[TraceEventOut] = Field(description="The run's timeline, in order.")


class ObservationsOut(BaseModel):
    run_id: str
    observations: list[dict[str, Any]] = Field(
        description="observation_id, kind, source, step, content, observation_version; in order."
    )


class BudgetsOut(BaseModel):
    run_id: str
    budgets: list[dict[str, Any]] = Field(
        description="Each budget's name, used and limit (null: unlimited)."
    )


class ConfirmationsOut(BaseModel):
    confirmations: list[PendingConfirmation] = Field(
        description="The runs waiting for a confirmation, longest waiting first."
    )


class HandoffPage(BaseModel):
    handoffs: list[dict[str, Any]] = Field(description="Newest first.")


class MemoryRecordsOut(BaseModel):
    subject: str
    records: list[dict[str, Any]]


# --- actions ---------------------------------------------------------------------------------


class DecisionIn(_In):
    proposal_hash: Text = Field(
        min_length=1,
        max_length=128,
        description="The pending proposal's hash (confirmation_request.proposal_hash).",
    )
    precondition: Text | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="When confirming: the state's fingerprint you were shown "
        "(confirmation_request.precondition.fingerprint). If the state moved and the request "
        "now shows another, the approval is refused PRECONDITION_CHANGED: look again.",
    )


Hash = Annotated[Text, Field(min_length=1, max_length=128)]


class DecisionsIn(_In):
    approve: list[Hash] = Field(
        default_factory=list,
        max_length=16,
        description="Hashes to approve: the pending proposal's, or calls of its parallel step "
        "(confirmation_request.parallel.calls[].proposal_hash) that need a person.",
    )
    decline: list[Hash] = Field(
        default_factory=list, max_length=16, description="Hashes to decline."
    )
    seen: dict[Hash, Hash] = Field(
        default_factory=dict,
        max_length=16,
        description="Hash → the state's fingerprint you were shown for that call; a moved "
        "state is refused PRECONDITION_CHANGED.",
    )


class DecisionsOut(BaseModel):
    run_id: str
    version: int = Field(description="The run's version after the decisions.")
    waiting_for: list[str] = Field(
        default_factory=list,
        description="The set's calls still waiting for a decision (or for more approvals): "
        "the run goes on once this is empty.",
    )


class CorrectionIn(_In):
    proposal_hash: Text = Field(
        min_length=1,
        max_length=128,
        description="The pending proposal's hash (confirmation_request.proposal_hash).",
    )
    changes: dict[Annotated[Text, Field(min_length=1, max_length=200)], Any] = Field(
        min_length=1,
        max_length=32,
        description="Argument → its new value (JSON). The rest of the arguments stay as "
        "proposed; a secret argument or one the tool's schema lacks is refused "
        "CORRECTION_INVALID, no change at all CORRECTION_EMPTY.",
    )
    reason: Text = Field(default="", max_length=500, description="Why (traced).")


class CorrectionOut(BaseModel):
    run_id: str
    version: int = Field(description="The run's version after the edit.")
    proposal_hash: str = Field(description="The new proposal's hash.")
    original_hash: str = Field(description="The proposal it replaces (declined, never run).")
    step: int = Field(description="The new proposal's step.")
    changed: list[str] = Field(description="The arguments the edit changed.")
    approved: bool = Field(
        description="The edit counts as your approval of the new hash (one approver needed, "
        "no state to be shown first); false: the new proposal waits for its own confirmation."
    )


class DecisionOut(BaseModel):
    run_id: str
    decision: Literal["approved", "declined"]
    version: int = Field(description="The run's version after the decision.")
    waiting_for_more: bool = Field(
        default=False, description="An approval recorded; more people must approve (M of N)."
    )
    approvals_required: int | None = Field(default=None, description="M, when waiting for more.")
    approved_by: list[str] | None = Field(
        default=None, description="Who approved so far, when waiting for more."
    )


class AnswerIn(_In):
    text: Text = Field(min_length=1, max_length=8_000, description="The answer to the question.")


class ForkIn(_In):
    at: int = Field(
        ge=-INT32_MAX,
        le=INT32_MAX,
        description="The step the fork starts at: 1 to the source's last step + 1 (else "
        "FORK_STEP_INVALID). The source's record before it is carried, not done again.",
    )
    spec_patch: dict[str, Any] | None = Field(
        default=None,
        description="A JSON merge patch (RFC 7386) of the source's spec: a changed goal, "
        "grants or planner. The merged spec is validated as a start's (SPEC_INVALID).",
    )


class CancelIn(_In):
    reason: Text = Field(default="", max_length=2_000, description="Why (only its length is kept).")


class GrantIn(_In):
    capability: Text = Field(min_length=1, max_length=100, examples=["artifact:write"])
    resource_scope: Text = Field(
        default="*", min_length=1, max_length=500, description="Exact, *, or a prefix ending in *."
    )
    expires_at_step: int | None = Field(default=None, ge=0, le=INT32_MAX)
    max_uses: int | None = Field(default=None, ge=1, le=INT32_MAX)
    destinations_from: list[DestinationSource] | None = Field(
        default=None,
        min_length=1,
        max_length=20,
        description="Task-scoped: the sources its destinations must come from "
        "(as a run spec's grant).",
    )
    expires_at: AwareDatetime | None = Field(default=None, description="Wall-clock end.")
    expires_in_s: float | None = Field(
        default=None, gt=0, le=7 * 24 * 3600, description="Or: seconds from the database's now."
    )
    widen: bool = Field(default=False, description="Widen a standing grant (traced).")
    constraints: dict[str, Any] | None = Field(
        default=None,
        description='Limits on argument values, as a spec\'s grant: {"max": {...}, "in": {...}}.',
    )


class GrantOut(BaseModel):
    run_id: str
    grant_id: int


class PreApprovalIn(_In):
    tool: Text = Field(min_length=1, max_length=200)
    tool_version: Text = Field(min_length=1, max_length=50)
    arguments: dict[str, Any] = Field(description="The exact arguments approved ahead of time.")


class PreApprovalOut(BaseModel):
    run_id: str
    pre_approval_id: int


class ResolveIn(_In):
    outcome: Literal["completed", "failed", "cancelled"]
    reason: Text = Field(min_length=1, max_length=2_000, description="Why (recorded).")


class MemoryRevokedOut(BaseModel):
    id: int
    key: str
    subject: str
    revoked_at: str
    revoked_by: str | None


class ToolSwitchIn(_In):
    tool: Text = Field(min_length=1, max_length=200, description="The tool's name (every version).")
    reason: Text = Field(default="", max_length=500, description="Why (recorded; disable only).")


class ToolSwitchOut(BaseModel):
    tool: str
    disabled: bool
    changed: bool
    """False when the tool already was so (the change is recorded anyway)."""
    event: Literal["tool.disabled", "tool.enabled"]
    by: str
    at: str
    reason: str | None


class PolicyApproved(BaseModel):
    policy_hash: str
    approved_by: str
    approved_at: str
    note: str | None


class PolicyOut(BaseModel):
    """The server's deployment policy (its registry and settings)."""

    policy_hash: str
    required: bool
    """``WARRANT_POLICY_APPROVAL=required``: unapproved, every proposal is refused."""
    approved: bool
    approval: PolicyApproved | None
    previous: str | None
    """The latest other approved policy the ``diff`` is from (None: none)."""
    diff: dict[str, Any]
    form: dict[str, Any]


class PolicyApprovalIn(_In):
    policy_hash: Text = Field(
        min_length=1, max_length=200, description="The policy reviewed (`GET /v1/policy`)."
    )
    note: Text | None = Field(default=None, max_length=500, description="Why (recorded).")


class PolicyApprovalOut(PolicyApproved):
    changed: bool
    """False when it already was approved (that approval is returned)."""
    previous: str | None
    diff: dict[str, Any]


# --- identity and health ---------------------------------------------------------------------


class IdentityOut(BaseModel):
    token_id: str
    name: str
    role: str = Field(description="producer, approver, operator or viewer.")
    label: str = Field(description="What is recorded as who acted.")


class HealthCheck(BaseModel):
    ok: bool
    latency_ms: float
    error: str | None = Field(default=None, description="Why the check failed.")


class Health(BaseModel):
    status: Literal["ok", "unavailable"] = Field(
        description="ok when the broker and the ledger both answered (HTTP 200), else "
        "unavailable (HTTP 503)."
    )
    broker: HealthCheck
    database: HealthCheck


# -- Replay and policy review (:mod:`warrant.runner.replay`) --------------------------------

#: The longest window a policy review looks back (a year).
MAX_SINCE_S = 366 * 86_400.0


class ReplayIn(_In):
    candidate: dict[str, Any] | None = Field(
        default=None,
        description="A policy candidate (contract changes, settings); none: the server's.",
    )


class PolicyDiffIn(ReplayIn):
    since_s: float = Field(gt=0, le=MAX_SINCE_S, description="How far back (seconds).")
    limit: int = Field(default=1000, ge=1, le=MAX_DIFF_RUNS, description="At most this many runs.")


class ReplayOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    replay_run_id: str
    source_run_id: str
    policy: str
    changed: int
    executed: int
    steps: list[dict[str, Any]]


class PolicyDiffOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    policy: str
    runs: int
    decisions: int
    changed: int
    runs_changed: int
    changes: list[dict[str, Any]]
