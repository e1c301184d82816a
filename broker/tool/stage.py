"""Tool stage: execute one command at most once per logical action, record a typed outcome.

Lifecycle in the ledger: ``issued -> started -> completed`` (or ``discarded``). Load → decide →
commit → publish, for an effect: the claim loads the command and commits its start in one
statement; the call is the effect (``broker.tool._call``); the record (``broker.tool.record``)
is the one write of the outcome with the run's change, and publishes the continuation after it.
A delivery the claim does not apply to loads the command (``load_tool``), and
:mod:`warrant.runner.tool_stage` decides what is left to do: a redelivery that finds an outcome
only re-emits the continuation; one that finds ``started`` leaves a live attempt alone
(``broker.tool.lease``) and, once the attempt is lost, re-invokes only tools that are safe to
re-invoke with the same idempotency token and records ``unknown`` for the others.
"""

from __future__ import annotations

import time
from typing import Any

from warrant.broker import telemetry
from warrant.broker.context import StageContext
from warrant.broker.limit_waits import Slot, send_again, tool_slot
from warrant.broker.tool import _attempt_watch as attempt_watch
from warrant.broker.tool import deadline, permission_waits, preconditions
from warrant.broker.tool._call import Snapshot, ToolResult, run_tool, snapshot_of
from warrant.broker.tool.lease import holder_lost, holder_of, lease_expired
from warrant.broker.tool.record import conclude, record, trace
from warrant.ledger.commands import claim_command, discard_command, start_command
from warrant.ledger.stage_loads import autocommit, load_tool
from warrant.ledger.workers import live_registrations
from warrant.runner.canonical import sha256_hex
from warrant.runner.codes import CommandStatus, Outcome, StopReason
from warrant.runner.tool_stage import delivery, planning, redirect, switched_off
from warrant.tools._contract import SideEffect, Tool

__all__ = ["tool_execute"]


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
    that another thread of this process holds is left to it, traced as any delivery that finds
    a live attempt), then the tool's shared limits (``broker.limit_waits``: a message that finds
    no free slot is sent again for later), then :func:`_claim_and_run` with the slot held: the
    attempt's deadlines start counting only after the wait."""
    with attempt_watch.taken_here(command_id, worker=worker) as mine:
        if not mine:
            with autocommit(ctx.engine) as conn:
                row = load_tool(conn, run_id, command_id)
            return "ignored" if row is None else _in_flight(ctx, row)
        with tool_slot(
            ctx, tool=tool, run_id=run_id, version=version, command_id=command_id
        ) as slot:
            if slot.deferred is not None:
                return slot.deferred
            return _claim_and_run(
                ctx, run_id, version, command_id, worker=worker, tool=tool, slot=slot
            )


def _claim(
    ctx: StageContext, run_id: str, version: int, command_id: str, *, worker: str | None, tool: str
) -> Any:
    """The common case in one statement: the command, ``issued`` for ``tool`` at a version
    this worker has, started (None: the claim did not apply). A read's start is only
    informational (re-running it is harmless): its commit does not wait for the WAL flush.
    Any other start is the durable intent before the effect. The claim matches the command's
    own tool, so a message naming another tool cannot relax it."""
    versions = ctx.registry.by_name(tool)
    read = bool(versions) and all(t.side_effect is SideEffect.READ for t in versions)
    with autocommit(ctx.engine, relaxed=read) as conn:
        return claim_command(
            conn,
            run_id=run_id,
            version=version,
            command_id=command_id,
            tool=tool,
            versions=[t.version for t in versions],
            worker=worker,
            heartbeat=deadline.concurrent(),
        )


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
    A delivery the claim does not apply to (a duplicate or late one, a stopped run, a started
    command, a message without the command's tool) takes :func:`_general_path`."""
    # The attempt's own deadlines count from here (broker.tool.deadline), and so does the deadline
    # its tool sees (on the database's clock): after any slot wait and any queueing.
    began, now = time.monotonic(), ctx.clock()
    row = None
    if tool is not None:
        row = _claim(ctx, run_id, version, command_id, worker=worker, tool=tool)
    if row is not None:
        found = ctx.registry.get(row.cmd_tool, row.cmd_tool_version)
        assert found is not None, "the claim only starts versions this worker has"
        # The record compares-and-sets at the version the claim checked, not at the returned
        # row's (newer if a cancel committed meanwhile: then the locked path sorts it out).
        snapshot = snapshot_of(row, attempt=row.cmd_attempts, version=version, now=now, began=began)
        if (refused := switched_off(row, claimed=True)) is not None:
            return conclude(ctx, snapshot, found, refused)  # disabled since the gate let it by
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
    """The claim did not apply: load, decide (:func:`warrant.runner.tool_stage.delivery`),
    write what it says. A started command whose attempt is lost is run again with the same
    token only if that is safe, and recorded ``unknown`` otherwise (the reconciler resolves it)."""
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
    if attempt is not None:
        snapshot = snapshot_of(row, attempt=attempt, version=version, now=now, began=began)
        if (refused := switched_off(row, claimed=False)) is not None:
            return conclude(ctx, snapshot, tool, refused)  # disabled since the gate let it by
        return _execute(ctx, tool, snapshot, worker=worker, slot=slot)
    if not started or tool.side_effect.safe_to_reinvoke:
        return "ignored"
    return _record_lost(ctx, row, tool, version=version, now=now)


def _record_lost(
    ctx: StageContext, row: Any, tool: Tool[Any, Any], *, version: int, now: float
) -> str:
    """Its attempt is known lost and its tool is not safe to run again with the same token:
    its effect is ``unknown`` (the reconciler resolves it)."""
    lost = ToolResult(
        Outcome.UNKNOWN,
        "WORKER_LOST_DURING_EXECUTION",
        "an earlier delivery started this command and its process is gone",
        stop=StopReason.UNKNOWN_EFFECT,
        trigger="worker-lost",
    )
    snapshot = snapshot_of(row, attempt=row.cmd_attempts, version=version, now=now)
    return record(ctx, snapshot, tool, lost)


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
    trace(ctx, row, "tool.delivery.in_flight", holder)
    return "in_flight"


def _redirect(ctx: StageContext, row: Any, *, version: int, worker: str | None) -> str:
    """Send the message again for a worker that has the command's tool version
    (:func:`warrant.runner.tool_stage.redirect`); the stage's result."""
    capable, countdown = redirect(row, live_registrations(ctx.engine))
    details = {"tool": row.cmd_tool, "tool_version": row.cmd_tool_version, "worker": worker}
    trace(ctx, row, "tool.delivery.redirected", {**details, "capable_workers": capable[:10]})
    send_again(ctx, row, version=version, tool=row.cmd_tool, countdown=countdown)
    return f"redirected:{row.cmd_tool}@{row.cmd_tool_version}"


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
        first = held is None and permission_waits.reconciles_first(ctx, snapshot, tool)
        outcome = held or run_tool(ctx, tool, snapshot, reconcile_first=first)
        if sp is not None:
            sp.set_attribute("warrant.outcome", outcome.status.value)
            if outcome.code:
                sp.set_attribute("warrant.code", outcome.code)
    if outcome.abandoned:  # the service may still be serving it: its slot stays taken
        slot.keep_until(snapshot.deadline_at - ctx.clock())
    return conclude(ctx, snapshot, tool, outcome)
