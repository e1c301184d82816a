"""Stable names: run statuses, phases, stop reasons, rejection codes, trace events.

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
    """The planner said the goal cannot be answered from its evidence (a ``no_answer``)."""
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


class Rejection(StrEnum):
    """Stable policy rejection codes (``INVALID_<FIELD>`` codes are built per field)."""

    PROPOSAL_PARSE_FAILED = "PROPOSAL_PARSE_FAILED"
    PROPOSAL_TOO_DEEP = "PROPOSAL_TOO_DEEP"
    """Arrays and objects nested more than ``canonical.MAX_JSON_DEPTH`` (64) levels deep,
    counting the proposal itself (the parse layer, before anything walks it recursively)."""
    UNKNOWN_TOOL_OR_VERSION = "UNKNOWN_TOOL_OR_VERSION"
    TOOL_NOT_DEPLOYED = "TOOL_NOT_DEPLOYED"
    """The policy worker has the tool, but the workers serving its queue do not."""
    MCP_TOOL_CHANGED = "MCP_TOOL_CHANGED"
    """An MCP server serves another definition of the tool than the one pinned (until an
    operator accepts it: ``warrant mcp accept``)."""
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
    MODEL_OUTPUT_INVALID = "MODEL_OUTPUT_INVALID"


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
    """Not an end: the service took a job (``warrant.tools.jobs``); its poll settles it."""


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
