"""Stable names: run statuses, phases, stop reasons, rejection codes, error codes, trace events.

These strings are the contract with operators and tests (they come from the design texts);
never rename one, only add.
"""

from __future__ import annotations

__layer__ = "codes and errors"

from enum import StrEnum


class RunStatus(StrEnum):
    RUNNING = "running"
    WAITING_CONFIRMATION = "waiting_confirmation"
    NEEDS_INPUT = "needs_input"
    CANCELLING = "cancelling"
    RECONCILING = "reconciling"
    WAITING_JOB = "waiting_job"
    """A long-running tool's job was accepted: the reconciler polls it (no worker waits)."""
    WAITING_GRANT = "waiting_grant"
    """The gate refused a proposal for a missing grant and the spec says ``ask``: an operator's
    grant sends the same proposal through the gate again (``policy.on_missing_grant``)."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    HANDOFF = "handoff"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
"""Nothing changes these (but an effect found after the end, which goes to a person).
``needs_input`` is not one of them: an answer to the clarification lets the run go on."""


class CommandStatus(StrEnum):
    """Where a command (one proposal the gate accepted for a tool) is in its life."""

    ISSUED = "issued"
    """Published to its tool queue (or re-issued for another attempt of the same token)."""
    STARTED = "started"
    """An attempt claimed it and holds its lease."""
    COMPLETED = "completed"
    """An outcome ends it (the effect may still be resolved by the reconciler)."""
    DISCARDED = "discarded"
    """Never executed: its run moved on before a worker claimed it."""


class Phase(StrEnum):
    """Which stage message the run is waiting for (what a re-publish would send)."""

    PLANNING = "planning"
    POLICY = "policy"
    TOOL = "tool"
    IDLE = "idle"


class StopReason(StrEnum):
    FINAL_ANSWER_VALIDATED = "FINAL_ANSWER_VALIDATED"
    FINAL_CITATION_VALIDATION_FAILED = "FINAL_CITATION_VALIDATION_FAILED"
    NO_ANSWER = "NO_ANSWER"
    """The planner said the goal cannot be answered from its evidence (a ``no_answer``): an
    honest abstention, status ``completed`` with no answer (the reason kept as ``answer``).
    A parent's ``delegate`` call still counts a child's abstention as no answer (a failed
    job), never as a result."""
    EVIDENCE_INSUFFICIENT = "EVIDENCE_INSUFFICIENT"
    """Handoff: the planner escalated (``{"kind": "escalate", "evidence": "insufficient"}``):
    the evidence it has is not enough to decide, and a person should."""
    EVIDENCE_CONFLICTING = "EVIDENCE_CONFLICTING"
    """Handoff: the planner escalated (``"evidence": "conflicting"``): its sources disagree,
    and a person should decide which holds."""
    SUCCESS_CONDITION_NOT_MET = "SUCCESS_CONDITION_NOT_MET"
    """A final answer while the spec's ``success`` conditions did not hold (after
    ``max_refused_finals`` such refusals)."""
    MAX_STEPS_REACHED = "MAX_STEPS_REACHED"
    MAX_MODEL_CALLS_REACHED = "MAX_MODEL_CALLS_REACHED"
    MAX_TOOL_CALLS_REACHED = "MAX_TOOL_CALLS_REACHED"
    MAX_TOKENS_REACHED = "MAX_TOKENS_REACHED"
    MAX_COST_REACHED = "MAX_COST_REACHED"
    DEADLINE_REACHED = "DEADLINE_REACHED"
    REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION = "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    PROPOSAL_OSCILLATION_DETECTED = "PROPOSAL_OSCILLATION_DETECTED"
    """A cycle of proposals (any period up to ``max_cycle_period``) with no new observation."""
    STEPS_WITHOUT_NEW_OBSERVATION = "STEPS_WITHOUT_NEW_OBSERVATION"
    """``max_steps_without_new_observation`` proposals in a row added nothing new, whatever
    they were."""
    UNTRUSTED_INFLUENCE = "UNTRUSTED_INFLUENCE"
    """``handoff.after_untrusted_refusals`` proposals were refused after the run read untrusted
    content: a person looks (a persistent injection), the run does not burn its budget."""
    USER_CONFIRMATION_REQUIRED = "USER_CONFIRMATION_REQUIRED"
    CLARIFICATION_REQUIRED = "CLARIFICATION_REQUIRED"
    GRANT_REQUIRED = "GRANT_REQUIRED"
    """Waiting (``waiting_grant``): the pending proposal needs a grant the run does not hold."""
    MODEL_FAILED = "MODEL_FAILED"
    TOOL_FAILED = "TOOL_FAILED"
    TOOL_POSTCONDITION_FAILED = "TOOL_POSTCONDITION_FAILED"
    TOOL_INTERNAL_ERROR = "TOOL_INTERNAL_ERROR"
    UNKNOWN_EFFECT = "UNKNOWN_EFFECT"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    CANCELLED = "CANCELLED"
    CONFIRMATION_EXPIRED = "CONFIRMATION_EXPIRED"
    RESOLVED_BY_HUMAN = "RESOLVED_BY_HUMAN"
    REPLAYED = "REPLAYED"
    """A replay's end (a run of kind ``replay``): its source's recorded proposals were
    decided again by the gate, and nothing was executed."""


BUDGET_STOPS = frozenset(
    {
        StopReason.MAX_STEPS_REACHED,
        StopReason.MAX_MODEL_CALLS_REACHED,
        StopReason.MAX_TOOL_CALLS_REACHED,
        StopReason.MAX_TOKENS_REACHED,
        StopReason.MAX_COST_REACHED,
        StopReason.DEADLINE_REACHED,
    }
)
"""Stops for an exhausted budget: their ``stop_detail`` lists the artifacts the run made and
its budget snapshot (a budget stop says which budget ran out and what was already made)."""


class Rejection(StrEnum):
    """Stable policy rejection codes (``INVALID_<FIELD>`` codes are built per field)."""

    PROPOSAL_PARSE_FAILED = "PROPOSAL_PARSE_FAILED"
    POLICY_NOT_APPROVED = "POLICY_NOT_APPROVED"
    """``WARRANT_POLICY_APPROVAL=required`` and the policy worker's deployment policy (its
    tool contracts and gate settings, one hash) is not one an operator approved (``warrant
    policy approve``): every proposal is refused, right after the parse layer."""
    PROPOSAL_TOO_DEEP = "PROPOSAL_TOO_DEEP"
    """Arrays and objects nested more than ``canonical.MAX_JSON_DEPTH`` (64) levels deep,
    counting the proposal itself (the parse layer, before anything walks it recursively)."""
    UNKNOWN_TOOL_OR_VERSION = "UNKNOWN_TOOL_OR_VERSION"
    TOOL_NOT_DEPLOYED = "TOOL_NOT_DEPLOYED"
    """The policy worker has the tool, but the workers serving its queue do not."""
    MCP_TOOL_CHANGED = "MCP_TOOL_CHANGED"
    """An MCP server serves another definition of the tool than the one pinned (until an
    operator accepts it: ``warrant mcp accept``)."""
    TOOL_DISABLED = "TOOL_DISABLED"
    """An operator disabled the tool (``warrant tools disable``, the kill switch): refused
    right after the registry layer, and a command already issued for it that has not started
    is concluded ``rejected`` with this code at its claim, the tool never called."""
    INPUT_NOT_OBJECT = "INPUT_NOT_OBJECT"
    UNKNOWN_INPUT_FIELD = "UNKNOWN_INPUT_FIELD"
    INPUT_TOO_LARGE = "INPUT_TOO_LARGE"
    MISSING_CAPABILITY = "MISSING_CAPABILITY"
    RESOURCE_OUT_OF_SCOPE = "RESOURCE_OUT_OF_SCOPE"
    RESOURCE_NOT_IN_TASK = "RESOURCE_NOT_IN_TASK"
    """In a grant's scope, but its task-scoped grants' sources (``destinations_from``: the
    goal, named trusted observations) mention the value nowhere."""
    RESOURCE_INVALID = "RESOURCE_INVALID"
    """A resource argument that is no valid value of its kind (a URL with userinfo, a path
    with ``..``, an address with a display name, a list with a non-string)."""
    GRANT_EXPIRED = "GRANT_EXPIRED"
    GRANT_EXHAUSTED = "GRANT_EXHAUSTED"
    GRANT_CONSTRAINT_VIOLATED = "GRANT_CONSTRAINT_VIOLATED"
    """Authorization layer: the call's arguments break a constraint of every grant that
    would cover it (``Grant.constraints``: an amount over its ``max``, a value outside its
    ``in`` set, or the constrained argument missing). The message names the argument and the
    limit, never the value."""
    MEMORY_KEY_NOT_ALLOWED = "MEMORY_KEY_NOT_ALLOWED"
    MEMORY_VALUE_TOO_LONG = "MEMORY_VALUE_TOO_LONG"
    PATH_OUTSIDE_RUN_OUTPUT = "PATH_OUTSIDE_RUN_OUTPUT"
    STATE_GUARD_FAILED = "STATE_GUARD_FAILED"
    CONFIRMATION_DECLINED = "CONFIRMATION_DECLINED"
    UNTRUSTED_ARGUMENT = "UNTRUSTED_ARGUMENT"
    """Provenance layer: an argument of a write or egress call (a value, or a URL, address or
    IBAN inside it) no trusted text supplied. Not a refusal by itself: the call waits for a
    person (no pre-approval covers it)."""
    UNTRUSTED_DESTINATION = "UNTRUSTED_DESTINATION"
    """Provenance layer: a destination (a typed resource: recipient, URL host, path, account,
    IBAN) or a credential of a write or egress call that no trusted text supplied, under the
    tool's default policy (``UntrustedPolicy.destinations`` ``refuse``)."""
    UNTRUSTED_CONTENT = "UNTRUSTED_CONTENT"
    """Provenance layer: a whole value of a write or egress call copied from untrusted content
    that nothing the user named vouches for, under the tool's default policy
    (``UntrustedPolicy.copied`` ``refuse``). The message says which argument and which
    observation, never the value."""
    MODEL_OUTPUT_INVALID = "MODEL_OUTPUT_INVALID"
    PARALLEL_TOO_MANY_CALLS = "PARALLEL_TOO_MANY_CALLS"
    """A parallel step with more calls than the spec's ``policy.max_parallel_calls``: refused
    whole (none of its calls runs)."""
    PARALLEL_BUDGET_EXCEEDED = "PARALLEL_BUDGET_EXCEEDED"
    """The calls of a parallel step the gate accepts do not all fit the run's remaining tool
    calls (or a tool's own cap): the set is refused whole, before any of it runs."""
    PARALLEL_DUPLICATE_CALL = "PARALLEL_DUPLICATE_CALL"
    """The same call (tool, version, arguments) twice in one parallel step: the later one."""
    PARALLEL_JOB_TOOL = "PARALLEL_JOB_TOOL"
    """A long-running tool (one that starts a job the run then waits for) among a parallel
    step's calls: that call is refused; such a tool runs in a step of its own. A sub-run
    (``delegate``) is the exception: several start together as a step's branches."""
    REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION = "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    """Loop layer, when the run's ``budgets.on_loop`` is ``refuse`` (planner kind ``external``
    by default): the same call (tool, version, arguments) more than ``max_repeated_proposal``
    times with no new observation since. The call is refused, the run goes on (with ``stop``,
    the stop reason of the same name ends the run)."""
    PROPOSAL_OSCILLATION_DETECTED = "PROPOSAL_OSCILLATION_DETECTED"
    """Loop layer, ``budgets.on_loop`` ``refuse``: the call completes a cycle of calls (A-B-A-B,
    ...) for the second time with no new observation. Refused; the run goes on."""
    DUPLICATE_EFFECT = "DUPLICATE_EFFECT"
    """The tool declares a business effect key (``Tool.effect_key``, e.g. ``refund:{order_id}``)
    and an earlier call with the same key, in this run (or in any run within the tool's
    ``effect_window_s``), succeeded, has an unknown effect or is still in flight: the refusal
    names that earlier call. ``repeat_effect: true`` in the proposal asks a person instead."""
    DELEGATION_WIDENS_GRANT = "DELEGATION_WIDENS_GRANT"
    """Delegation layer (a ``delegate`` call): a grant asked for the child that no live grant
    of the parent holds as wide (capability, scope, wall-clock expiry, uses left, task
    sources). Refused before the child exists; each hop can only narrow."""
    DELEGATION_OVER_BUDGET = "DELEGATION_OVER_BUDGET"
    """Delegation layer: a budget asked for the child that exceeds what the parent has left
    (model calls, tool calls, tokens, cost, time). Refused before the child exists."""
    DELEGATION_TOO_DEEP = "DELEGATION_TOO_DEEP"
    """Delegation layer: the run may start no sub-run (``policy.max_delegation_depth`` is 0
    here: a child's own depth is its parent's less one)."""
    DELEGATION_FAN_OUT = "DELEGATION_FAN_OUT"
    """Delegation layer: the run has started ``policy.max_children`` sub-runs already."""
    PLAN_INVALID = "PLAN_INVALID"
    """A planner's ``plan`` that is no graph it may follow (a field out of bounds, a repeated
    node id, a dependency on no node, a cycle): refused at its step, planned again."""
    PLAN_UNCHANGED = "PLAN_UNCHANGED"
    """A ``plan`` identical to the run's current one (nodes, statuses, open questions): no
    revision is recorded; the step counts and the planner is asked to act instead."""
    WAIT_INVALID = "WAIT_INVALID"
    """A planner's ``wait`` that gives neither or both of ``seconds`` and ``until``, an
    ``until`` without ``max_seconds``, or a bound out of range: refused, planned again."""
    WAIT_TOO_LONG = "WAIT_TOO_LONG"
    """A ``wait`` longer than the run's ``budgets.max_wait_s`` (its ``seconds``, or an event
    wait's ``max_seconds``): refused, planned again."""
    WAIT_PAST_DEADLINE = "WAIT_PAST_DEADLINE"
    """A ``wait`` that could not end before the run's deadline (the deadline keeps running
    while a run waits): refused, planned again; the planner may still answer or stop."""


def invalid_field_code(field: str) -> str:
    """``INVALID_<FIELD>`` for a schema error on ``field`` (dots and dashes become ``_``)."""
    cleaned = "".join(ch if ch.isalnum() else "_" for ch in field).strip("_")
    return f"INVALID_{cleaned.upper() or 'INPUT'}"


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    REJECTED = "rejected"
    FAILED = "failed"
    UNKNOWN = "unknown"
    ACCEPTED = "accepted"
    """Not an end: the service took a job (``JobHooks``); its poll settles it."""


class ObservationSource(StrEnum):
    USER = "user"
    TRUSTED_TOOL = "trusted-tool"
    UNTRUSTED_CONTENT = "untrusted-content"
    POLICY = "policy"


class ObservationKind(StrEnum):
    USER = "user-message"
    TOOL_RESULT = "tool-result"
    POLICY_REJECTION = "policy-rejection"
    CONFIRMATION = "confirmation"
    STEP_MERGED = "step-merged"
    """A parallel step's verdict: each branch with its source, status and outcome."""


class ErrorCode(StrEnum):
    """Every stable ``code`` a :class:`~warrant.runner.errors.WarrantError` carries: each error
    class's default (``WarrantError.code`` is ``WARRANT_ERROR``, ``RunNotFound.code`` is
    ``RUN_NOT_FOUND``, ...) and the finer codes given where one is raised (``USAGE_ERROR``,
    ``INTERNAL_ERROR``, ``RUN_NOT_CANCELLABLE``, ...). The ``code`` of ``--json`` output and
    of an HTTP error body is one of these. ``tests/unit/test_errors.py`` checks that every
    class's code is a member and every code given at a raise site is one; docs/using-it.md's
    table is generated from it (``python -m bench.error_codes_table``)."""

    ALREADY_APPROVED = "ALREADY_APPROVED"
    ANSWER_IDENTITY_REQUIRED = "ANSWER_IDENTITY_REQUIRED"
    ANSWER_INVALID = "ANSWER_INVALID"
    ARCHIVE_INVALID = "ARCHIVE_INVALID"
    ARCHIVE_UNREADABLE = "ARCHIVE_UNREADABLE"
    ARCHIVE_UNWRITABLE = "ARCHIVE_UNWRITABLE"
    ARGUMENTS_NOT_JSON = "ARGUMENTS_NOT_JSON"
    ARGUMENTS_NOT_OBJECT = "ARGUMENTS_NOT_OBJECT"
    BROKER_UNAVAILABLE = "BROKER_UNAVAILABLE"
    CALL_ID_INVALID = "CALL_ID_INVALID"
    CANDIDATE_INVALID = "CANDIDATE_INVALID"
    """A policy candidate (``warrant run replay --candidate``, ``warrant policy diff
    --candidate``) that is not valid JSON of its shape, or changes a tool the registry lacks."""
    CONFIRMATION_ALREADY_DECIDED = "CONFIRMATION_ALREADY_DECIDED"
    CONFIRMATION_EXPIRED = "CONFIRMATION_EXPIRED"
    CONFIRMATION_HASH_MISMATCH = "CONFIRMATION_HASH_MISMATCH"
    CONFIRMATION_IDENTITY_REQUIRED = "CONFIRMATION_IDENTITY_REQUIRED"
    CONFIRMATION_REFUSED = "CONFIRMATION_REFUSED"
    CORRECTION_EMPTY = "CORRECTION_EMPTY"
    """A person's edit of a pending proposal (``warrant run correct``, ``POST
    /v1/runs/{id}/correct``) that changes no argument: approve the proposal instead."""
    CORRECTION_INVALID = "CORRECTION_INVALID"
    """An edit of a pending proposal naming an argument the tool's schema lacks or a secret
    one, values the schema refuses, or a call of a parallel step: nothing is recorded."""
    CSRF_FAILED = "CSRF_FAILED"
    CURSOR_INVALID = "CURSOR_INVALID"
    DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
    DECISION_EMPTY = "DECISION_EMPTY"
    DECISION_HASH_REPEATED = "DECISION_HASH_REPEATED"
    DEMO_NOT_INSTALLED = "DEMO_NOT_INSTALLED"
    DURATION_INVALID = "DURATION_INVALID"
    EFFECT_KEY_INVALID = "EFFECT_KEY_INVALID"
    FORBIDDEN = "FORBIDDEN"
    FORK_SOURCE_INVALID = "FORK_SOURCE_INVALID"
    """``warrant run fork`` of a replay (it executed nothing to go on from: fork its source)."""
    FORK_STEP_INVALID = "FORK_STEP_INVALID"
    """``warrant run fork --at STEP`` outside 1 to the source's last step + 1, or after a step
    whose effect is not settled yet."""
    GRANT_WIDENING_REFUSED = "GRANT_WIDENING_REFUSED"
    HANDOFF_ALREADY_RESOLVED = "HANDOFF_ALREADY_RESOLVED"
    HANDOFF_NOT_FOUND = "HANDOFF_NOT_FOUND"
    IDEMPOTENCY_KEY_INVALID = "IDEMPOTENCY_KEY_INVALID"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    IDEMPOTENCY_TOKEN_CONFLICT = "IDEMPOTENCY_TOKEN_CONFLICT"
    IDENTITY_REQUIRED = "IDENTITY_REQUIRED"
    ID_AMBIGUOUS = "ID_AMBIGUOUS"
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    INVALID_BATCH = "INVALID_BATCH"
    INVALID_CHOICE = "INVALID_CHOICE"
    INVALID_DATE = "INVALID_DATE"
    INVALID_LIMIT = "INVALID_LIMIT"
    INVALID_REQUEST = "INVALID_REQUEST"
    INVALID_RESOLUTION = "INVALID_RESOLUTION"
    LEDGER_TAMPERED = "LEDGER_TAMPERED"
    MCP_CONFIG_INVALID = "MCP_CONFIG_INVALID"
    MCP_JOB_ID_MISSING = "MCP_JOB_ID_MISSING"
    MCP_OUTCOME_UNKNOWN = "MCP_OUTCOME_UNKNOWN"
    MCP_SCHEMA_INVALID = "MCP_SCHEMA_INVALID"
    MCP_SERVER_UNAVAILABLE = "MCP_SERVER_UNAVAILABLE"
    MCP_SERVER_UNKNOWN = "MCP_SERVER_UNKNOWN"
    MCP_TIMEOUT = "MCP_TIMEOUT"
    MCP_TOOL_ERROR = "MCP_TOOL_ERROR"
    MCP_TOOL_MISSING = "MCP_TOOL_MISSING"
    MCP_TOOL_UNDECLARED = "MCP_TOOL_UNDECLARED"
    MEMORY_KEY_NOT_ALLOWED = "MEMORY_KEY_NOT_ALLOWED"
    MEMORY_NOT_FOUND = "MEMORY_NOT_FOUND"
    MEMORY_RETENTION_UNDEFINED = "MEMORY_RETENTION_UNDEFINED"
    MEMORY_SOURCE_NOT_CONFIRMED = "MEMORY_SOURCE_NOT_CONFIRMED"
    MEMORY_SUBJECT_OUT_OF_SCOPE = "MEMORY_SUBJECT_OUT_OF_SCOPE"
    MEMORY_VALUE_TOO_LONG = "MEMORY_VALUE_TOO_LONG"
    MEMORY_VERSION_CONFLICT = "MEMORY_VERSION_CONFLICT"
    MIGRATION_STATE_UNREADABLE = "MIGRATION_STATE_UNREADABLE"
    MISSING_CAPABILITY = "MISSING_CAPABILITY"
    MODEL_CALL_ABANDONED = "MODEL_CALL_ABANDONED"
    MODEL_OUTPUT_INVALID = "MODEL_OUTPUT_INVALID"
    NOT_FOUND = "NOT_FOUND"
    NOT_YOUR_RUN = "NOT_YOUR_RUN"
    OPERATOR_TOKEN_INVALID = "OPERATOR_TOKEN_INVALID"
    OWN_RUN_APPROVAL_FORBIDDEN = "OWN_RUN_APPROVAL_FORBIDDEN"
    PLANNER_CONFLICT = "PLANNER_CONFLICT"
    PLANNER_FAILED = "PLANNER_FAILED"
    PLANNER_RETRY_LATER = "PLANNER_RETRY_LATER"
    PLUGIN_LOAD_FAILED = "PLUGIN_LOAD_FAILED"
    POLICY_HASH_MISMATCH = "POLICY_HASH_MISMATCH"
    """``warrant policy approve HASH`` (``POST /v1/policy/approvals``) names another hash than
    the deployment policy this process (or the server) computes: nothing is approved (an
    operator approves the policy they reviewed)."""
    PRECONDITION_CHANGED = "PRECONDITION_CHANGED"
    PROPOSAL_INVALID = "PROPOSAL_INVALID"
    PROPOSAL_IN_FLIGHT = "PROPOSAL_IN_FLIGHT"
    PROPOSAL_TOO_DEEP = "PROPOSAL_TOO_DEEP"
    PROPOSAL_TOO_LARGE = "PROPOSAL_TOO_LARGE"
    REQUEST_INVALID = "REQUEST_INVALID"
    REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
    RESOLUTION_IDENTITY_REQUIRED = "RESOLUTION_IDENTITY_REQUIRED"
    RESOURCE_INVALID = "RESOURCE_INVALID"
    REVEAL_FORBIDDEN = "REVEAL_FORBIDDEN"
    REVEAL_IDENTITY_REQUIRED = "REVEAL_IDENTITY_REQUIRED"
    RUN_FINISHED = "RUN_FINISHED"
    RUN_NOT_CANCELLABLE = "RUN_NOT_CANCELLABLE"
    RUN_NOT_EXTERNAL = "RUN_NOT_EXTERNAL"
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    REPLAY_SOURCE_INVALID = "REPLAY_SOURCE_INVALID"
    """``warrant run replay`` of a run that is itself a replay (replay its source instead)."""
    RUN_NOT_WAITING_CONFIRMATION = "RUN_NOT_WAITING_CONFIRMATION"
    RUN_NOT_WAITING_INPUT = "RUN_NOT_WAITING_INPUT"
    RUN_RECONCILING = "RUN_RECONCILING"
    RUN_WAITING_JOB = "RUN_WAITING_JOB"
    SCOPE_INVALID = "SCOPE_INVALID"
    SECRET_MISSING = "SECRET_MISSING"
    SERVER_UNREACHABLE = "SERVER_UNREACHABLE"
    SERVE_START_FAILED = "SERVE_START_FAILED"
    SERVE_START_TIMEOUT = "SERVE_START_TIMEOUT"
    SERVICES_NOT_CONFIGURED = "SERVICES_NOT_CONFIGURED"
    SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
    SETTINGS_INVALID = "SETTINGS_INVALID"
    SPEC_INVALID = "SPEC_INVALID"
    STACK_ALREADY_RUNNING = "STACK_ALREADY_RUNNING"
    STACK_NOT_RUNNING = "STACK_NOT_RUNNING"
    STACK_START_FAILED = "STACK_START_FAILED"
    STACK_STOP_TIMEOUT = "STACK_STOP_TIMEOUT"
    STALE_VERSION = "STALE_VERSION"
    STATE_CONFLICT = "STATE_CONFLICT"
    STATUS_INVALID = "STATUS_INVALID"
    STEP_INVALID = "STEP_INVALID"
    STEP_MISMATCH = "STEP_MISMATCH"
    SWEEP_LOCK_LOST = "SWEEP_LOCK_LOST"
    TOKEN_INVALID = "TOKEN_INVALID"
    TOKEN_NAME_INVALID = "TOKEN_NAME_INVALID"
    TOKEN_NOT_FOUND = "TOKEN_NOT_FOUND"
    TOOL_CONFLICT = "TOOL_CONFLICT"
    TOOL_ERROR = "TOOL_ERROR"
    TOOL_FAILED = "TOOL_FAILED"
    TOOL_INTERRUPTED = "TOOL_INTERRUPTED"
    TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
    TOOL_PERMISSION_DENIED = "TOOL_PERMISSION_DENIED"
    TOOL_REJECTED = "TOOL_REJECTED"
    TOOL_ROLE_MISMATCH = "TOOL_ROLE_MISMATCH"
    UNKNOWN_QUEUE = "UNKNOWN_QUEUE"
    UNKNOWN_ROLE = "UNKNOWN_ROLE"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    USAGE_ERROR = "USAGE_ERROR"
    WAIT_TIMED_OUT = "WAIT_TIMED_OUT"
    WARRANT_ERROR = "WARRANT_ERROR"
    WORKER_START_FAILED = "WORKER_START_FAILED"
    WORKER_START_TIMEOUT = "WORKER_START_TIMEOUT"
    WRITE_UNVERIFIED = "WRITE_UNVERIFIED"
    """A write tool declares neither ``verify`` (its postcondition read back) nor ``reconcile``
    (its effect looked up by the idempotency token) nor ``unverified=True`` with an
    ``unverified_reason``: the registry refuses it (``warrant.tools._contract:
    verification_problem``)."""
