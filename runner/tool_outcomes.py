"""What a tool call's result means: the tool stage's pure decisions.

A call either raised or returned. :func:`of_error` types what it raised (rejected, failed with
or without a retry, unknown for a write whose effect cannot be known, an internal error) and
:func:`of_output` checks what it returned (the output schema; an accepted long-running job).
The broker (``broker.tool._call``) runs the call and says what only it can know — whether the
error was an interruption or a lost database connection, whether the run is being cancelled,
whether the run's deadline bounded the attempt — as plain flags; ``warrant.testing`` calls the
same functions in process, so a plug-in author's test sees the outcome the workers would record.

The reconciler's decisions on a tool's answer about an unknown effect are here too
(``broker/reconciler/_effects.py`` asks the tool, locks the outcome, its run and command, and
carries them out): the run no longer waits on the effect (a person has it, or it ended):
record the answer, and an effect found applied after the run ended goes to a person;
``applied``: the real outcome, the run goes on; ``not_applied``: retry the same command and
token, or stop (:func:`after_not_applied`), but only once no attempt can still be applying it;
no ``reconcile`` hook, or still unknown too many times: a person; else ask again later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from warrant.runner.canonical import canonical_json, content_hash, sha256_hex
from warrant.runner.codes import Outcome, StopReason
from warrant.runner.errors import ToolFailed, ToolRejected, ToolUnknown
from warrant.runner.permission_wait import GrantWait
from warrant.runner.retry import backoff_delay
from warrant.tools._contract import (
    PRECONDITION_UNREADABLE,
    Accepted,
    OnError,
    PreconditionContext,
    SideEffect,
    Tool,
    ToolUsage,
)

__all__ = [
    "UNCLASSIFIED",
    "Answer",
    "Interruption",
    "Next",
    "ToolResult",
    "after_not_applied",
    "ask_again_in",
    "batch_answer",
    "bounded_output",
    "item_status",
    "late_effect_to_a_person",
    "may_still_be_applying",
    "next_step",
    "of_error",
    "of_output",
    "postcondition_checked",
    "prechecked",
    "refused",
]

log = logging.getLogger("warrant.tool")

UNCLASSIFIED = "TOOL_INTERNAL_ERROR"
"""The code of an exception the tool did not classify (neither rejected, failed nor unknown)."""
INTERRUPTED = frozenset({"CANCELLED_DURING_EXECUTION", "TOOL_TIMEOUT"})
"""The codes of a call the worker interrupted (a cancel, its time limit) before it returned."""


@dataclass
class ToolResult:
    """The typed outcome of one call, before it is recorded."""

    status: Outcome
    code: str | None = None
    message: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    output: dict[str, Any] | None = None
    stop: StopReason | None = None
    trigger: str | None = None
    """For ``unknown``: what made the effect uncertain (adapter, timeout, cancellation)."""
    handoff: bool = False
    """A person must look at the effect (a failed postcondition nothing compensated)."""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    usage: ToolUsage = field(default_factory=ToolUsage)
    """What the call reported it consumed (``ToolContext.report_usage``): charged to the run."""
    grant_wait: GrantWait | None = None
    """A permission refusal in a run that asks: the run waits for a grant (``permission_wait``)."""

    @property
    def abandoned(self) -> bool:
        """The service may still be working on the call: its effect is unknown, or the worker
        interrupted it before it answered. A shared limit's slot then stays taken until the
        attempt's deadline (``broker.limit_waits``)."""
        return self.status is Outcome.UNKNOWN or self.code in INTERRUPTED


@dataclass(frozen=True, kw_only=True)
class Interruption:
    """What the broker knows about an error the tool did not raise itself."""

    interrupted: bool = False
    """A soft time limit or a cancel's signal ended the call."""
    database_lost: bool = False
    """A database connection failed during the call."""
    cancelled: bool = False
    """The run is being cancelled (an interruption is then the cancel's)."""
    deadline_bound: bool = False
    """The attempt's time limit was cut to the run's deadline (a timeout then ends the run
    ``DEADLINE_REACHED``)."""


def refused(
    tool: Tool[Any, Any], code: str, said: str | None, *, output: dict[str, Any] | None = None
) -> ToolResult:
    """A business refusal (``rejected``, nothing applied): re-planned, unless the tool declares
    its code ``ask_user`` (``Tool.errors``): then the run asks its user
    (``CLARIFICATION_REQUIRED``, :func:`warrant.runner.run_machine.conclude_tool`)."""
    asks = tool.errors.get(code) == OnError.ASK_USER
    stop = StopReason.CLARIFICATION_REQUIRED if asks else None
    return ToolResult(Outcome.REJECTED, code, said, output=output, stop=stop)


def prechecked(
    tool: Tool[Any, Any], arguments: dict[str, Any], reading: PreconditionContext, *, attempt: int
) -> ToolResult | None:
    """The tool's ``precheck`` (a business check on its own service, read only) before an
    attempt: None, the call runs; a refusal with its code (``rejected``, re-planned or asked
    per ``Tool.errors``); a check that could not be made fails the attempt, retryable
    (``PRECONDITION_UNREADABLE``). The tool stage and ``warrant.testing`` both run it."""
    assert tool.precheck is not None
    said = None
    try:
        code = tool.precheck(tool.parse_input(arguments), reading)
    except ToolRejected as exc:  # the check's own words
        code, said = exc.code, tool.outcome_message(str(exc), arguments) or None
    except Exception as exc:
        log.warning("the precheck of %s failed", tool.name, exc_info=True)
        why = f"the check before the call could not be made ({type(exc).__name__}); not run"
        unreadable = {"tool": tool.name, "error": type(exc).__name__, "attempt": attempt}
        events = [("precheck.unreadable", unreadable)]
        return ToolResult(
            Outcome.FAILED, PRECONDITION_UNREADABLE, why, retryable=True, events=events
        )
    if not code:
        return None
    said = said or f"{tool.name} refused the call before it ran ({code}); nothing was done"
    result = refused(tool, code, said)
    result.events.append(("precheck.refused", {"tool": tool.name, "code": code}))
    return result


def of_error(
    tool: Tool[Any, Any], exc: Exception, *, said: str | None, seen: Interruption
) -> ToolResult:
    """The typed outcome of a call that raised ``exc`` (``said``: its message, bounded and
    masked): the error's type decides."""
    write = tool.side_effect is not SideEffect.READ
    if isinstance(exc, ToolRejected):
        return refused(tool, exc.code, said, output=exc.details)
    if isinstance(exc, ToolFailed):
        return ToolResult(
            Outcome.FAILED,
            exc.code,
            said,
            retryable=exc.retryable,
            retry_after_s=exc.retry_after_s,
            stop=None if exc.retryable else StopReason.TOOL_FAILED,
        )
    if isinstance(exc, ToolUnknown) or seen.interrupted:
        return _unknown_or_timed_out(exc, said, seen, write=write)
    if seen.database_lost:  # the ledger or a tool's database went away
        return _database_lost(exc, write=write)
    # unclassified: an internal error; stop, never retry blindly. A write's effect is then
    # unknown (the adapter may have sent it before it broke): the reconciler asks.
    if write:
        return ToolResult(
            Outcome.UNKNOWN,
            UNCLASSIFIED,
            type(exc).__name__,
            stop=StopReason.UNKNOWN_EFFECT,
            trigger="unclassified",
        )
    return ToolResult(
        Outcome.FAILED,
        "TOOL_INTERNAL_ERROR",
        type(exc).__name__,
        stop=StopReason.TOOL_INTERNAL_ERROR,
    )


def _unknown_or_timed_out(
    exc: Exception, said: str | None, seen: Interruption, *, write: bool
) -> ToolResult:
    if isinstance(exc, ToolUnknown):
        code, trigger = exc.code, "adapter"
    elif seen.cancelled:
        code, trigger = "CANCELLED_DURING_EXECUTION", "cancellation"
    else:
        code, trigger = "TOOL_TIMEOUT", "timeout"
    said = said or code
    if write:
        return ToolResult(
            Outcome.UNKNOWN, code, said, stop=StopReason.UNKNOWN_EFFECT, trigger=trigger
        )
    deadline = trigger == "timeout" and seen.deadline_bound
    stop = StopReason.DEADLINE_REACHED if deadline else StopReason.TOOL_FAILED
    return ToolResult(Outcome.FAILED, code, said, stop=stop)


def _database_lost(exc: Exception, *, write: bool) -> ToolResult:
    """A database connection failed during the call: transient (a read is retried, a write's
    effect is unknown)."""
    if write:
        return ToolResult(
            Outcome.UNKNOWN,
            "DATABASE_UNAVAILABLE",
            f"a database connection failed during the call ({type(exc).__name__})",
            stop=StopReason.UNKNOWN_EFFECT,
            trigger="database",
        )
    return ToolResult(
        Outcome.FAILED,
        "DATABASE_UNAVAILABLE",
        f"a database connection failed during the read ({type(exc).__name__})",
        retryable=True,
    )


def of_output(tool: Tool[Any, Any], out: Any) -> tuple[ToolResult, Any]:
    """A returned output: an accepted job, or the output validated against its schema.
    Returns the result and the validated output (``None`` when there is none to verify)."""
    if isinstance(out, Accepted):
        return _accepted(tool, out), None
    try:
        validated = tool.output_model.model_validate(out.model_dump(mode="json"))
    except (ValidationError, AttributeError):
        invalid = ToolResult(
            Outcome.FAILED,
            "TOOL_OUTPUT_INVALID",
            "output failed its schema",
            stop=StopReason.TOOL_INTERNAL_ERROR,
        )
        return invalid, None
    result = ToolResult(Outcome.SUCCEEDED, output=validated.model_dump(mode="json"))
    result.events.append(("tool.result.validated", {"tool": tool.name}))
    return result, validated


def postcondition_checked(
    tool: str, *, ok: bool, attempts: int, command_id: str, attempt: int, output: Any
) -> tuple[str, dict[str, Any]]:
    """The ``tool.postcondition.checked`` event: whether the postcondition held, after how
    many reads, and its evidence: the outcome it was checked for (``command_id`` and
    ``attempt``, the key of that ``outcomes`` row) and ``output_hash``, the canonical hash
    of the validated output the check read back against (the row's ``output``)."""
    evidence = {"command_id": command_id, "attempt": attempt, "output_hash": content_hash(output)}
    return (
        "tool.postcondition.checked",
        {"tool": tool, "ok": ok, "attempts": attempts, "evidence": evidence},
    )


# --- the output's size budget ------------------------------------------------------------------
# An observation must stay bounded (the planner reads it, the ledger keeps it): an output larger
# than its tool's ``max_output_bytes`` is checked whole (schema, postcondition) and then kept
# cut, with a marker the planner sees; the effect's outcome itself is recorded as it is.

#: Room kept for the marker and the JSON around the kept fields.
_MARKER_ROOM = 600
#: The smallest bound a tool may ask for (a smaller one is raised to it).
MIN_OUTPUT_BYTES = 1_024
TRUNCATED = "_truncated"
"""The output field that says an output was cut: ``truncated: true``, ``original_bytes``,
``sha256`` of the whole output's canonical JSON, ``kept_bytes`` and the ``cut`` fields."""


def _size(value: Any) -> int:
    return len(canonical_json(value))


def _cut(value: Any, room: int) -> Any:
    """``value`` within about ``room`` bytes: a list's leading elements, a string's head,
    anything else its canonical JSON's head (as a string)."""
    if isinstance(value, list):
        kept, used = [], 2
        for item in value:
            used += _size(item) + 1
            if used > room:
                break
            kept.append(item)
        return kept
    text = value if isinstance(value, str) else canonical_json(value).decode()
    head = text.encode()[: max(room - 2, 0)].decode(errors="ignore")
    while _size(head) > room and head:  # escapes make the JSON longer than the text
        head = head[: len(head) * 3 // 4]
    return head


def bounded_output(
    output: dict[str, Any] | None, limit: int
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The output as the ledger and the planner keep it, and its marker (None: kept whole).
    Over ``limit`` bytes of canonical JSON: its smallest fields whole while they fit, the
    larger ones cut, sharing the room left (:func:`_cut`: a list's first elements, a
    string's head), and the marker under :data:`TRUNCATED`."""
    if output is None:
        return None, None
    whole = canonical_json(output)
    limit = max(limit, MIN_OUTPUT_BYTES)
    if len(whole) <= limit:
        return output, None
    budget, used = limit - _MARKER_ROOM, 2
    kept: dict[str, Any] = {}
    cut: list[str] = []
    for size, name in sorted((_size(v) + _size(k) + 1, k) for k, v in output.items()):
        if used + size <= budget:
            kept[name], used = output[name], used + size + 1
        else:
            cut.append(name)
    for left, name in enumerate(cut):  # the room left shared among the fields cut
        room = (budget - used) // (len(cut) - left) - _size(name) - 2
        if room > 16:
            kept[name] = _cut(output[name], room)
            used += _size(kept[name]) + _size(name) + 2
    marker = {
        "truncated": True,
        "original_bytes": len(whole),
        "kept_bytes": used,
        "sha256": sha256_hex(whole),
        "cut": sorted(cut),
    }
    return {**kept, TRUNCATED: marker}, marker


def _accepted(tool: Tool[Any, Any], out: Accepted) -> ToolResult:
    if tool.job is None or not isinstance(out.operation_id, str) or not out.operation_id:
        why = "returned Accepted without job hooks" if tool.job is None else "no operation id"
        return ToolResult(
            Outcome.FAILED, "TOOL_OUTPUT_INVALID", why, stop=StopReason.TOOL_INTERNAL_ERROR
        )
    output: dict[str, Any] = {"operation_id": out.operation_id[:200]}
    if out.details:
        output["details"] = out.details
    return ToolResult(Outcome.ACCEPTED, output=output)


def after_not_applied(
    *,
    code: str | None,
    attempts: int,
    max_attempts: int,
    calls_left: bool,
    time_left_s: float,
) -> tuple[StopReason, str] | None:
    """An unknown effect the reconciler found not applied: ``None`` retries the same command
    (same idempotency token), else why the run stops. An adapter's unclassified error is never
    retried (it would break again), nor an attempt past the tool's ``max_attempts``, past the
    run's tool-call budget or with too little time left."""
    if code == UNCLASSIFIED:
        return StopReason.TOOL_INTERNAL_ERROR, UNCLASSIFIED
    if attempts >= max_attempts:
        return StopReason.TOOL_FAILED, "NOT_APPLIED_MAX_ATTEMPTS"
    if not calls_left or time_left_s <= 0.5:
        return StopReason.TOOL_FAILED, "NOT_APPLIED_NO_BUDGET"
    return None


# --- the reconciler: a tool's answer about an unknown effect ------------------------------


class Answer(StrEnum):
    """The tool's answer, as the reconciler records it (``reconciliations.result``)."""

    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    UNKNOWN = "unknown"
    ERROR = "error"
    """The status query itself failed."""
    UNSUPPORTED = "unsupported"
    """The tool has no ``reconcile`` hook (or is no longer registered)."""


class Next(StrEnum):
    """What the reconciler does with an answer."""

    RECORD = "record"
    """The run moved on: record the answer (a late applied effect also goes to a person)."""
    APPLY = "apply"
    RETRY_OR_STOP = "retry_or_stop"
    TO_A_PERSON = "to_a_person"
    ASK_AGAIN = "ask_again"


#: Unknown outcomes recorded by someone other than the attempt itself (the attempt may not
#: have noticed that it was declared lost, and may still be applying the effect).
RECORDED_FOR_THE_ATTEMPT = frozenset({"WORKER_LOST_DURING_EXECUTION", "COMMAND_LEASE_EXPIRED"})


def next_step(answer: Answer, *, run_waits: bool, tries: int, max_tries: int) -> Next:
    """``run_waits``: the run is reconciling or cancelling on this effect; ``tries``: the
    reconciliations counted so far, this one included."""
    known = answer in (Answer.APPLIED, Answer.NOT_APPLIED)
    if known and not run_waits:
        return Next.RECORD
    if answer == Answer.APPLIED:
        return Next.APPLY
    if answer == Answer.NOT_APPLIED:
        return Next.RETRY_OR_STOP
    if answer == Answer.UNSUPPORTED or tries >= max_tries:
        return Next.TO_A_PERSON
    return Next.ASK_AGAIN


def late_effect_to_a_person(answer: Answer, *, run_ended: bool) -> bool:
    """An effect found applied after its run ended is a person's to look at."""
    return answer == Answer.APPLIED and run_ended


def may_still_be_applying(*, code: str | None, attempts: int, outcome_attempt: int) -> bool:
    """Could the attempt this unknown outcome stands for still be running? Only when someone
    else declared it lost and no later attempt was issued: then "not applied" must wait for
    that attempt's hard limit before it is believed."""
    return code in RECORDED_FOR_THE_ATTEMPT and attempts == outcome_attempt


def ask_again_in(tries: int) -> float:
    """Seconds until a still-unknown effect is asked about again."""
    return max(0.5, backoff_delay(tries, base_s=2.0, cap_s=300.0))


def item_status(applied: bool | None) -> str:
    """A batch item's status from its own reconcile answer."""
    return {True: "applied", False: "failed", None: "unknown"}[applied]


def batch_answer(outcome: str) -> Answer:
    """A batch's answer from the verdict over its items (all applied → applied, any still
    unknown → unknown, else not applied: the retry is given only the items not applied)."""
    return {
        "succeeded": Answer.APPLIED,
        "unknown": Answer.UNKNOWN,
        "failed": Answer.NOT_APPLIED,
    }[outcome]
