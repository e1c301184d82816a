"""Tool stage: execute one command at most once per logical action, record a typed outcome.

Lifecycle in the ledger: ``issued -> started -> completed`` (or ``discarded``). The common
case is two statements: the claim (load and start) and the record. A redelivery that finds an
outcome only re-emits the continuation; one that finds ``started`` leaves a live attempt alone
(``broker.tool.lease``) and, once the attempt is lost, re-invokes only tools that are safe to
re-invoke with the same idempotency token and records ``unknown`` for the others (the
reconciler resolves it). Calling the tool is ``broker.tool._call``; recording what it did,
``broker.tool.record`` (and ``broker.tool._late`` for an attempt that is no longer current).

Load → decide → commit → publish, for an effect: the claim loads the command and commits its
start in one statement (a delivery the claim does not apply to loads it with ``load_tool`` and
decides what is left to do in :func:`_general_path`); the call is the effect; the record is the
one write of the outcome with the run's change, and publishes the continuation after it.
"""

from __future__ import annotations

import time
from typing import Any

from warrant.broker import telemetry
from warrant.broker.context import StageContext
from warrant.broker.limit_waits import Slot, send_again, tool_slot
from warrant.broker.registration import live_registrations
from warrant.broker.tool import _attempt_watch as attempt_watch
from warrant.broker.tool import deadline, preconditions
from warrant.broker.tool._call import Snapshot, ToolResult, run_tool, snapshot_of
from warrant.broker.tool.lease import holder_lost, holder_of, lease_expired
from warrant.broker.tool.record import conclude, record
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.commands import claim_command, discard_command, start_command
from warrant.ledger.db import session_scope
from warrant.ledger.repo import append_events
from warrant.ledger.stage_loads import autocommit, load_tool
from warrant.runner.canonical import sha256_hex
from warrant.runner.codes import CommandStatus, Outcome, StopReason
from warrant.runner.tool_stage import delivery, planning, redirect
from warrant.tools._contract import SideEffect, Tool

__all__ = ["tool_execute"]


def _worker_lost() -> ToolResult:
    """The outcome of a started command whose attempt is known lost (its tool is not safe
    to run again with the same token): the reconciler asks the service."""
    return ToolResult(
        Outcome.UNKNOWN,
        "WORKER_LOST_DURING_EXECUTION",
        "an earlier delivery started this command and its process is gone",
        stop=StopReason.UNKNOWN_EFFECT,
        trigger="worker-lost",
    )


def tool_execute(
    ctx: StageContext,
    run_id: str,
    version: int,
    command_id: str,
    *,
    worker: str | None = None,
    tool: str | None = None,
) -> str:
    """The command is this thread's first (``attempt_watch.taken_here``: a duplicate delivery
    that another thread of this process holds is left to it), then the tool's shared limits
    (``broker.limits``: a message that finds no free slot is sent again for later), then
    :func:`_claim_and_run` with the slot held: the attempt's deadlines start counting only
    after the wait."""
    with attempt_watch.taken_here(command_id, worker=worker) as mine:
        if not mine:
            return _taken_elsewhere_here(ctx, run_id, command_id)
        with tool_slot(
            ctx, tool=tool, run_id=run_id, version=version, command_id=command_id
        ) as slot:
            if slot.deferred is not None:
                return slot.deferred
            return _claim_and_run(
                ctx, run_id, version, command_id, worker=worker, tool=tool, slot=slot
            )


def _taken_elsewhere_here(ctx: StageContext, run_id: str, command_id: str) -> str:
    """Another thread of this process is claiming or running the command: this delivery is
    dropped (that thread records the outcome, or sorts its own delivery out), traced as any
    delivery that finds a live attempt."""
    with autocommit(ctx.engine) as conn:
        row = load_tool(conn, run_id, command_id)
    if row is None:
        return "ignored"
    return _in_flight(ctx, row)


def _claim_and_run(
    ctx: StageContext,
    run_id: str,
    version: int,
    command_id: str,
    *,
    worker: str | None,
    tool: str | None,
    slot: Slot,
) -> str:
    """Claim the command, run the tool, record the outcome: two statements in the common case.

    A tool with an effect (any side effect but ``read``) gets ``started`` committed before it
    runs: a delivery that finds it started and unfinished re-invokes it with the same token
    only if that is safe, and records ``unknown`` otherwise; the reconciler finds it by its
    lease. A read has no effect to protect: its start does not wait for the WAL flush (a lost
    start simply runs the read again). ``tool`` is the message's tool name; without it (or
    if it is not the command's) the command takes the general path, with a durable start."""
    # The attempt's own deadlines count from here (broker.tool.deadline), and so does the deadline
    # its tool sees (on the database's clock): after any slot wait and any queueing.
    began, now = time.monotonic(), ctx.clock()
    if tool is None:
        return _general_path(
            ctx, run_id, version, command_id, worker=worker, began=began, now=now, slot=slot
        )
    # A read's start is only informational (re-running it is harmless): its commit does not
    # wait for the WAL flush. Any other start is the durable intent before the effect. The
    # claim matches the command's own tool, so a message naming another tool cannot relax it.
    versions = ctx.registry.by_name(tool)
    read = bool(versions) and all(t.side_effect is SideEffect.READ for t in versions)
    with autocommit(ctx.engine, relaxed=read) as conn:
        row = claim_command(
            conn,
            run_id=run_id,
            version=version,
            command_id=command_id,
            tool=tool,
            versions=[t.version for t in versions],
            worker=worker,
            heartbeat=deadline.concurrent(),
        )
    if row is not None:
        found = ctx.registry.get(row.cmd_tool, row.cmd_tool_version)
        assert found is not None, "the claim only starts versions this worker has"
        # The record compares-and-sets at the version the claim checked, not at the returned
        # row's (newer if a cancel committed meanwhile: then the locked path sorts it out).
        snapshot = snapshot_of(row, attempt=row.cmd_attempts, version=version, now=now, began=began)
        return _execute(ctx, found, snapshot, worker=worker, slot=slot)
    return _general_path(
        ctx, run_id, version, command_id, worker=worker, began=began, now=now, slot=slot
    )


def _general_path(
    ctx: StageContext,
    run_id: str,
    version: int,
    command_id: str,
    *,
    worker: str | None,
    began: float,
    now: float,
    slot: Slot,
) -> str:
    """The claim did not apply: a duplicate or late delivery, a stopped run, a started
    command whose tool may (or may not) be re-invoked, or a message that does not name the
    command's tool. Load, decide (:func:`warrant.runner.tool_stage.delivery`), then write."""
    with autocommit(ctx.engine) as conn:
        row = load_tool(conn, run_id, command_id)
    tool = None if row is None else ctx.registry.get(row.cmd_tool, row.cmd_tool_version)
    started = row is not None and row.cmd_status == CommandStatus.STARTED
    lost = started and _attempt_lost(ctx, row, worker)
    what = delivery(row, version=version, lost=lost, runnable=tool is not None)
    if what == "duplicate" and planning(row):
        ctx.publisher.planner(run_id, row.version)
    elif what == "discard":
        with autocommit(ctx.engine) as conn:
            discard_command(conn, command_id)
        return "discarded"
    elif what == "in_flight":
        return _in_flight(ctx, row)
    elif what == "redirect":  # a rolling upgrade: another worker has this version
        return _redirect(ctx, row, version=version, worker=worker)
    if what != "start" or tool is None:
        return what
    with autocommit(ctx.engine) as conn:
        attempt = start_command(
            conn,
            run_id=run_id,
            version=version,
            command_id=command_id,
            worker=worker,
            reinvoke=tool.side_effect.safe_to_reinvoke,
            seen_attempt=row.cmd_attempts,
            key_hash=sha256_hex(row.cmd_token)[:16],
            heartbeat=deadline.concurrent(),
        )
    if attempt is None:
        if not started or tool.side_effect.safe_to_reinvoke:
            return "ignored"
        snapshot = snapshot_of(row, attempt=row.cmd_attempts, version=version, now=now)
        return record(ctx, snapshot, tool, _worker_lost())
    snapshot = snapshot_of(row, attempt=attempt, version=version, now=now, began=began)
    return _execute(ctx, tool, snapshot, worker=worker, slot=slot)


def _attempt_lost(ctx: StageContext, row: Any, worker: str | None) -> bool:
    """May a delivery that finds the command ``started`` declare its attempt lost? Only when
    the attempt's lease has expired by the database's clock (``cmd_running_s``: never this
    host's clock) or its process is known gone (see ``broker.tool.lease``)."""
    settings = ctx.settings
    if lease_expired(
        row.cmd_running_s,
        row.cmd_timeout_s,
        margin_s=settings.lease_margin_s,
        heartbeat_age_s=row.cmd_heartbeat_age_s,
        heartbeat_timeout_s=settings.lease_heartbeat_timeout_s,
    ):
        return True
    return holder_lost(
        holder_of(row.cmd_worker),
        here=holder_of(worker),
        running_here=attempt_watch.live_here(row.cmd_id, worker=worker),
    )


def _in_flight(ctx: StageContext, row: Any) -> str:
    """Another attempt of this command is running: leave it alone (this delivery is dropped;
    a lost attempt is found by its lease, by the reconciler's stale sweep)."""
    holder = {"tool": row.cmd_tool, "attempt": row.cmd_attempts, "holder": row.cmd_worker}
    _trace(ctx, row, "tool.delivery.in_flight", holder)
    return "in_flight"


def _redirect(ctx: StageContext, row: Any, *, version: int, worker: str | None) -> str:
    """Send the message again for a worker that has the command's tool version
    (:func:`warrant.runner.tool_stage.redirect`); the stage's result."""
    capable, countdown = redirect(row, live_registrations(ctx.engine))
    details = {"tool": row.cmd_tool, "tool_version": row.cmd_tool_version, "worker": worker}
    _trace(ctx, row, "tool.delivery.redirected", {**details, "capable_workers": capable[:10]})
    send_again(ctx, row, version=version, tool=row.cmd_tool, countdown=countdown)
    return f"redirected:{row.cmd_tool}@{row.cmd_tool_version}"


def _trace(ctx: StageContext, row: Any, name: str, details: dict[str, Any]) -> None:
    with session_scope(ctx.engine) as s:
        append_events(
            s, row.id, [(name, details)], step=row.cmd_step, proposal_id=row.cmd_proposal_id
        )


def _execute(
    ctx: StageContext, tool: Tool[Any, Any], snapshot: Snapshot, *, worker: str | None, slot: Slot
) -> str:
    """Run the attempt and record its outcome; on a threads pool, under the process's attempt
    watch from the claim to the record (its heartbeat is the lease:
    ``broker.tool._attempt_watch``)."""
    if not deadline.concurrent() or worker is None:
        return _attempt(ctx, tool, snapshot, slot)
    settings = ctx.settings
    watch = attempt_watch.the_watch(
        ctx.engine,
        worker,
        beat_s=settings.lease_heartbeat_s,
        timeout_s=settings.lease_heartbeat_timeout_s,
    )
    with watch.watching(
        command_id=snapshot.command_id,
        run_id=snapshot.run_id,
        began=snapshot.began,
        timeout_s=snapshot.timeout_s,
        hard_s=snapshot.timeout_s + HARD_LIMIT_GRACE_S,
    ):
        return _attempt(ctx, tool, snapshot, slot)


def _attempt(ctx: StageContext, tool: Tool[Any, Any], snapshot: Snapshot, slot: Slot) -> str:
    held = preconditions.before_execution(ctx, tool, snapshot)  # the state the approver saw
    if isinstance(held, str):  # it moved: refused and asked again
        return held
    with telemetry.span(
        "tool.execute",
        run_id=snapshot.run_id,
        proposal_id=snapshot.proposal_id,
        tool=tool.name,
        attempt=snapshot.attempt,
    ) as sp:
        outcome = held or run_tool(ctx, tool, snapshot)
        if sp is not None:
            sp.set_attribute("warrant.outcome", outcome.status.value)
            if outcome.code:
                sp.set_attribute("warrant.code", outcome.code)
    if outcome.abandoned:  # the service may still be serving it: its slot stays taken
        slot.keep_until(snapshot.deadline_at - ctx.clock())
    return conclude(ctx, snapshot, tool, outcome)
