"""Calling a tool: its context, its deadline and cancellation, and what it did, classified
(succeeded, rejected, failed, unknown) — the tool stage's pure-ish middle, with no ledger writes."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import sqlalchemy.exc
from celery.exceptions import SoftTimeLimitExceeded

from warrant.broker.context import StageContext
from warrant.broker.tool import _attempt_watch as attempt_watch
from warrant.broker.tool import deadline, interrupts
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.repo import run_view
from warrant.runner.cancellation import CancelSignal
from warrant.runner.canonical import sha256_hex
from warrant.runner.codes import Outcome, RunStatus, StopReason
from warrant.runner.errors import ToolError, ToolInterrupted
from warrant.runner.tool_outcomes import (
    Interruption,
    ToolResult,
    bounded_output,
    of_error,
    of_output,
    postcondition_checked,
)
from warrant.runner.views import RunView
from warrant.tools import _batches as batches
from warrant.tools._contract import Tool, ToolContext

__all__ = ["Snapshot", "ToolResult", "run_tool", "snapshot_of"]

log = logging.getLogger("warrant.tool")
CANCEL_CHECK_EVERY_S = 0.2
CANCELLED_STATUSES = (RunStatus.CANCELLING.value, RunStatus.CANCELLED.value)
#: A lost or refused database connection inside a tool call (its own or a store's it uses).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    command_id: str
    run_id: str
    version: int
    step: int
    proposal_id: str
    arguments: dict[str, Any]
    token: str
    attempt: int
    deadline_at: float
    """The attempt's deadline (epoch seconds on the database's clock): ``timeout_s`` from the
    attempt's start, never past the run's deadline. It starts when the attempt does, after
    any wait for a shared limit's slot or in a queue (issue 47)."""
    timeout_s: float
    """The attempt's time limit: the command's, cut to what the run's deadline leaves."""
    subject: str
    confirmation_id: str | None
    started_at: float
    view: RunView
    began: float = field(default_factory=time.monotonic)
    """When the tool stage began handling the message (``time.monotonic()``, before the
    claim): the attempt's own deadlines count from here (:mod:`warrant.broker.tool.deadline`)."""
    branch: int = 0
    """A parallel step's branch (0: an ordinary step's command)."""


def snapshot_of(
    row: Any, *, attempt: int, version: int, now: float, began: float | None = None
) -> Snapshot:
    """The attempt of ``row``'s command that starts ``now`` (the database's clock)."""
    run_left = row.deadline_at.timestamp() - now
    timeout_s = max(0.001, min(row.cmd_timeout_s, run_left))
    branch = getattr(row, "cmd_branch", 0) or 0
    if branch:  # a parallel step's branch ends by its step's branch deadline, however late
        timeout_s = max(0.001, min(timeout_s, row.cmd_deadline_at.timestamp() - now))
    return Snapshot(
        command_id=row.cmd_id,
        run_id=row.id,
        version=version,
        step=row.cmd_step,
        proposal_id=row.cmd_proposal_id,
        arguments=dict(row.cmd_arguments),
        token=row.cmd_token,
        attempt=attempt,
        deadline_at=now + timeout_s,
        timeout_s=timeout_s,
        subject=row.subject,
        confirmation_id=row.cmd_confirmation_id,
        started_at=time.time(),
        view=run_view(row),
        began=time.monotonic() if began is None else began,
        branch=branch,
    )


def cancel_flag(ctx: StageContext, run_id: str) -> Any:
    """A cancellation check backed by the ledger (throttled), for tools to poll."""
    last = {"at": 0.0, "value": False}

    def is_cancelled(*, fresh: bool = False) -> bool:
        now = time.monotonic()
        stale = now - float(last["at"]) >= CANCEL_CHECK_EVERY_S
        if not last["value"] and (fresh or stale):
            last["at"] = now
            with interrupts.deferred():  # never mid-query (see broker.tool.interrupts)
                last["value"] = ctx.tool_deps.run_status(run_id) in CANCELLED_STATUSES
                if last["value"]:  # the tool stops on its own: no interruption now
                    interrupts.seen_cancel()
                    attempt_watch.seen_cancel()
        return bool(last["value"])

    return is_cancelled


def run_tool(
    ctx: StageContext, tool: Tool[Any, Any], snap: Snapshot, *, reconcile_first: bool = False
) -> ToolResult:
    """Call the tool once (deadline, idempotency token, cancellation) and type its outcome.
    On a threads pool the context's ``interrupt`` is the attempt watch's signal for it, and
    a call that outlived its interruption is traced (``tool.interrupt.unreached``).
    ``reconcile_first``: ask the tool about the token before calling it (the attempt after
    its permission refusal, :mod:`warrant.runner.permission_wait`); found applied, that is
    the outcome and the tool is not called."""
    watched = attempt_watch.this_attempt()
    context = ToolContext(
        run_id=snap.run_id,
        command_id=snap.command_id,
        subject=snap.subject,
        idempotency_token=snap.token,
        attempt=snap.attempt,
        deadline_at=snap.deadline_at,
        deps=ctx.deps_for(tool),
        is_cancelled=cancel_flag(ctx, snap.run_id),
        confirmation_id=snap.confirmation_id,
        clock=ctx.clock,
        interrupt=watched.signal if watched is not None else CancelSignal(),
    )
    batch = None
    if tool.batch is not None:  # the first attempt of a command has no earlier reports (no read)
        reports = ctx.tool_deps.item_reports(snap.command_id) if snap.attempt > 1 else []
        batch = BatchCall(tool, snap.arguments, reports)
    applied, asked = _applied_before(tool, snap, context) if reconcile_first else (None, None)
    result = applied or _called(ctx, tool, snap, context, batch)
    if asked is not None:
        result.events.insert(0, asked)
    result.output, cut = bounded_output(result.output, tool.max_output_bytes)
    if cut is not None:  # checked whole above; kept bounded (traced: sizes, never content)
        sizes = {k: cut[k] for k in ("original_bytes", "kept_bytes", "cut")}
        result.events.append(("tool.output.truncated", {"tool": tool.name, **sizes}))
    result.usage = context.reported_usage  # whatever the outcome: the call was paid for
    unreached = watched.unreached() if watched is not None else None
    if unreached is not None:
        result.events.append(("tool.interrupt.unreached", {"tool": tool.name, **unreached}))
    return result


def _called(
    ctx: StageContext,
    tool: Tool[Any, Any],
    snap: Snapshot,
    context: ToolContext,
    batch: BatchCall | None,
) -> ToolResult:
    try:
        if batch is not None and batch.nothing_left:  # all applied by earlier attempts
            return _of_batch(batch, ToolResult(Outcome.SUCCEEDED, output={}))
        args = tool.parse_input(batch.given if batch is not None else snap.arguments)
        with _limits(tool, snap, context):
            out = tool.execute(args, context)
    except Exception as exc:
        return _classified(ctx, tool, snap, exc)
    result = _checked(tool, snap, args, out, context)
    return result if batch is None else _of_batch(batch, result)


def _applied_before(
    tool: Tool[Any, Any], snap: Snapshot, context: ToolContext
) -> tuple[ToolResult | None, tuple[str, dict[str, Any]]]:
    """The tool's answer about the token before it is called again, and its trace event
    (``tool.reconciled_before_call``): applied, a succeeded outcome with what it says (the
    tool is not called); not applied, unknown or no answer: None (the call goes ahead, with
    the same token)."""
    assert tool.reconcile is not None
    try:
        found = tool.reconcile(snap.token, context)
        applied = found.applied
    except Exception as exc:
        log.warning("reconciling %s before its call failed: %s", tool.name, type(exc).__name__)
        found, applied = None, None
    event = ("tool.reconciled_before_call", {"tool": tool.name, "applied": applied})
    if found is None or applied is not True:
        return None, event
    return ToolResult(Outcome.SUCCEEDED, output=dict(found.output or {})), event


def _of_batch(batch: BatchCall, result: ToolResult) -> ToolResult:
    """A batch tool's report merged with its earlier attempts' (``broker.tool._call``)."""
    if result.status is not Outcome.SUCCEEDED or result.stop is not None:
        return result
    fields = batch.conclude(result.status, result.output)
    counts = Counter(str(item.get("status")) for item in fields["output"]["items"])
    events = [*result.events, ("tool.batch.items", dict(counts))]
    return dataclasses.replace(result, **fields, events=events)


@contextmanager
def _limits(tool: Tool[Any, Any], snap: Snapshot, context: ToolContext) -> Iterator[None]:
    """The tool's own code, under its deadline and cancellation: on a threads pool the
    process's attempt watch raises into it (``broker.tool._attempt_watch``); on prefork a cancel's
    SIGUSR1 lands only here (one that came earlier, only if the run is cancelling) and the
    process ends itself at the hard limit (``broker.tool.deadline``)."""
    if deadline.concurrent():
        with attempt_watch.in_tool():
            yield
        return
    with (
        interrupts.interruptible(cancelled=lambda: context.is_cancelled(fresh=True)),
        deadline.own_deadline(
            soft_at=snap.began + snap.timeout_s + deadline.SOFT_LIMIT_LAG_S,
            hard_at=snap.began + snap.timeout_s + HARD_LIMIT_GRACE_S,
            what=f"attempt {snap.attempt} of command {snap.command_id} ({tool.name})",
        ),
    ):
        yield


def _classified(
    ctx: StageContext, tool: Tool[Any, Any], snap: Snapshot, exc: Exception
) -> ToolResult:
    """The typed outcome of a call that raised (``runner.tool_outcomes.of_error``), with what
    only the stage knows: an interruption, a lost database connection, a cancelling run."""
    interrupted = isinstance(exc, SoftTimeLimitExceeded | ToolInterrupted)
    seen = Interruption(
        interrupted=interrupted,
        database_lost=isinstance(exc, DATABASE_ERRORS),
        cancelled=interrupted and ctx.tool_deps.run_status(snap.run_id) in CANCELLED_STATUSES,
        deadline_bound=snap.timeout_s < tool.timeout_s - 1e-6,
    )
    if not (interrupted or seen.database_lost or isinstance(exc, ToolError)):
        log.error("tool %s raised an unclassified exception", tool.name, exc_info=exc)
    message = str(exc)  # what the tool said with its refusal or failure: bounded, masked
    said = tool.outcome_message(message, snap.arguments) if message else None
    return of_error(tool, exc, said=said, seen=seen)


def _checked(
    tool: Tool[Any, Any], snap: Snapshot, args: Any, out: Any, context: ToolContext
) -> ToolResult:
    """A returned output: validated against its schema, then the postcondition checked (an
    accepted job is checked when it settles: ``broker.reconciler._job_polls``)."""
    result, validated = of_output(tool, out)
    if validated is None or tool.verify is None:
        return result
    ok, attempts = _verified(tool, args, validated, context)
    result.events.append(
        postcondition_checked(
            tool.name,
            ok=ok,
            attempts=attempts,
            command_id=snap.command_id,
            attempt=snap.attempt,
            output=result.output,
        )
    )
    if not ok:
        result.stop, result.code = (
            StopReason.TOOL_POSTCONDITION_FAILED,
            "TOOL_POSTCONDITION_FAILED",
        )
        result.events.append(
            (
                "effect.compensation_required",
                {
                    "tool": tool.name,
                    "side_effect": tool.side_effect.value,
                    "idempotency_key_hash": sha256_hex(snap.token)[:16],
                },
            )
        )
        _compensated(tool, snap, context, result)
    return result


def _compensated(
    tool: Tool[Any, Any], snap: Snapshot, context: ToolContext, result: ToolResult
) -> None:
    """A failed postcondition: the contract's ``compensate`` undoes the effect (its own
    outcome, traced); without one, or when it fails, a person must look (``handoff``)."""
    if tool.compensate is None:
        result.handoff = True
        return
    began = time.monotonic()
    try:
        tool.compensate(snap.token, context)
        done: dict[str, Any] = {"status": Outcome.SUCCEEDED.value, "code": None}
    except Exception as exc:
        log.warning("compensating %s failed: %s", tool.name, type(exc).__name__)
        done = {"status": Outcome.FAILED.value, "code": getattr(exc, "code", type(exc).__name__)}
        result.handoff = True
    done["duration_ms"] = round((time.monotonic() - began) * 1000, 1)
    result.events.append(("effect.compensated", {"tool": tool.name, **done}))
    result.output = {**(result.output or {}), "compensation": done}


def _verified(tool: Tool[Any, Any], args: Any, out: Any, context: ToolContext) -> tuple[bool, int]:
    """The postcondition, read up to ``verify_attempts`` times while the deadline allows."""
    assert tool.verify is not None
    attempts = 0
    while True:
        attempts += 1
        if tool.verify(args, out, context):
            return True, attempts
        if attempts >= tool.verify_attempts or context.remaining_s() <= tool.verify_interval_s:
            return False, attempts
        time.sleep(tool.verify_interval_s)


# -- A batch tool's attempt (:mod:`warrant.tools._batches`): only the items not applied yet are
# passed to the tool, and its report is merged with the earlier attempts' into one outcome.


class BatchCall:
    """One attempt of a batch tool: the items it is given, and how its report concludes."""

    def __init__(self, tool: Tool[Any, Any], arguments: dict[str, Any], reports: list[Any]):
        assert tool.batch is not None
        self.batch, self.arguments, self.reports = tool.batch, arguments, reports
        self.applied = batches.applied_keys(reports)
        self.given = batches.narrowed(self.batch, arguments, self.applied)

    @property
    def nothing_left(self) -> bool:
        return not self.given[self.batch.items]

    def conclude(self, status: Outcome, output: dict[str, Any] | None) -> dict[str, Any]:
        """The attempt's outcome fields (status, code, retryable, message, output, stop) from
        what the tool returned (``output`` with ``items``) merged with the earlier reports."""
        now = (output or {}).get("items") or [] if status is Outcome.SUCCEEDED else []
        items = batches.merged(self.batch, self.arguments, self.reports, now)
        found = batches.verdict(items)
        fields: dict[str, Any] = {
            "status": Outcome(found.outcome),
            "code": found.code,
            "retryable": found.retryable,
            "message": found.message,
            "output": {**(output or {}), "items": items},
            "stop": None,
        }
        if found.outcome == Outcome.UNKNOWN.value:
            fields["stop"] = StopReason.UNKNOWN_EFFECT
            fields["trigger"] = "batch-item"
        return fields
