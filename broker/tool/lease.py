"""Who holds a started command, and until when: one live attempt per command.

A tool attempt is ``started`` by one worker process, recorded on the command as
``<node>/<pid>.<started>.<space>`` (:func:`worker_label`; see
:mod:`warrant.broker.process_identity`). Its lease lasts until the attempt's hard time limit
(the pool kills the process then; the process also ends itself then, see
:mod:`warrant.broker.tool.deadline`) plus a margin. The lease is measured on the database's clock
only: ``started_at`` is the database's ``now()`` at the claim, and a delivery compares it with
the database's ``now()`` again (:func:`lease_expired` on ``cmd_running_s``), never with its
host's clock, which may be minutes off. Until then a second delivery of
the same message must leave the command alone, unless the holder is known dead: a process of
the *same* kernel and pid namespace (``space``) whose pid no longer names the process that
started the attempt. The node name is never used for that: two hosts may share one. Every
doubt keeps the attempt live, so the worst a wrong guess costs is waiting for the lease to
expire (the reconciler's stale sweep), never a second attempt over a running one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from warrant.broker.handoff_entry import enter_handoff
from warrant.broker.process_identity import ProcessIdentity, process_started
from warrant.broker.tool._call import ToolResult
from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger import rows
from warrant.ledger.models import Command, Reconciliation, Run
from warrant.ledger.repo import append_events, record_outcome
from warrant.ledger.row_updates import resolve_outcome
from warrant.runner.codes import Outcome, RunStatus, StopReason
from warrant.runner.tool_stage import late_verdict, planning
from warrant.tools._contract import Tool

__all__ = [
    "Holder",
    "holder_lost",
    "holder_of",
    "lease_end",
    "lease_expired",
    "process_gone",
    "record_late",
    "worker_label",
]


@dataclass(frozen=True)
class Holder:
    node: str
    """The Celery node name (``name@host``) whose pool ran the attempt: for people only."""
    pid: int | None
    """The pool process, if recorded."""
    started: int | None = None
    """The process's start time (clock ticks since boot), if recorded."""
    space: str | None = None
    """Kernel boot and pid namespace the pid belongs to; None for labels written before it
    was recorded (such a holder is never judged lost by pid)."""


def worker_label(node: str, process: ProcessIdentity) -> str:
    """What a tool attempt records as its worker: ``<node>/<pid>.<started>.<space>``."""
    return f"{node}/{process.label}"


def holder_of(worker: str | None) -> Holder | None:
    if not worker:
        return None
    node, _, ident = worker.rpartition("/")
    if not node:
        return Holder(worker, None)
    parts = ident.split(".")
    if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit() and parts[2]:
        return Holder(node, int(parts[0]), int(parts[1]), parts[2])
    if ident.isdigit():  # an earlier release's ``<node>/<pid>``
        return Holder(node, int(ident))
    return Holder(worker, None)


def lease_end(started_at: float, timeout_s: float, *, margin_s: float) -> float:
    """When an attempt started at ``started_at`` can no longer be running: its hard time
    limit (``timeout_s`` + the grace the pool allows) plus ``margin_s``."""
    return started_at + timeout_s + HARD_LIMIT_GRACE_S + margin_s


def lease_expired(
    running_s: float | None,
    timeout_s: float,
    *,
    margin_s: float,
    heartbeat_age_s: float | None = None,
    heartbeat_timeout_s: float | None = None,
) -> bool:
    """Has an attempt that has been ``started`` for ``running_s`` seconds (by the database's
    clock; None: no start recorded) outlived its lease? An attempt with a heartbeat (a
    threads-pool one, ``broker.tool._attempt_watch``; ``heartbeat_age_s`` by the database's clock)
    holds its lease until the heartbeat is ``heartbeat_timeout_s`` old, however long it runs."""
    if heartbeat_age_s is not None and heartbeat_timeout_s is not None:
        return heartbeat_age_s >= heartbeat_timeout_s
    if running_s is None:
        return True
    return running_s >= lease_end(0.0, timeout_s, margin_s=margin_s)


def process_gone(pid: int, *, started: int | None = None) -> bool:
    """True only if no live process has this pid on this machine (a zombie is gone), or the
    one that has it started at another time than ``started`` (the pid was reused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return True
    if started:
        now = process_started(pid)
        return now is not None and now != started
    return False


def holder_lost(
    holder: Holder | None, *, here: Holder | None, running_here: bool | None = None
) -> bool:
    """Is the attempt's process known to be no longer in it? Only decidable for a holder in
    this process's own pid space (same kernel boot, same pid namespace); anyone else is
    presumed alive until the lease ends. If the holder is this very process, its attempt is
    over unless ``running_here`` (a threads pool runs many: its attempt watch knows which);
    a prefork process runs one task at a time (a stage retry after a connection error brought
    the message back)."""
    if holder is None or holder.pid is None or holder.space is None:
        return False
    if here is None or here.space is None or holder.space != here.space:
        return False
    if holder.pid == here.pid and holder.started == here.started:
        return not running_here
    return process_gone(holder.pid, started=holder.started)


# -- An attempt that finishes after its command moved on: what it found is still a fact.
#
# An attempt concludes its command only while it is the command's current attempt (``started``
# at that attempt number). When it is not (the command was completed by someone else, or
# re-issued) it never transitions the run; but if it made (or may have made) an effect, the
# ledger must not keep saying the effect did not happen. What it means is
# :func:`warrant.runner.tool_stage.late_verdict`; :func:`record_late` writes it: a trace
# (``tool.attempt.superseded``, ``effect.found_late``), the corrected outcome, and a handoff for
# an effect the ledger did not know of (unless the run is back on this very command).


def record_late(
    ctx: Any,
    s: Session,
    run: Run,
    cmd: Command,
    tool: Tool[Any, Any],
    late: ToolResult,
    attempt: int,
    outbox: Any,
) -> str:
    """Record what attempt ``attempt``, no longer current, found (``run`` and ``cmd`` locked)."""
    prior = rows.attempt_outcome(s, cmd.id, attempt)
    status = RunStatus(run.status)
    result, recorded = late_verdict(
        status=late.status,
        code=late.code,
        output=late.output,
        attempt=attempt,
        side_effect=tool.side_effect,
        prior=prior,
        outcomes=rows.command_outcomes(s, cmd.id),
        run_status=status,
        same_command=run.active_command_id == cmd.id,
    )
    if result == "duplicate":
        if planning(run):
            outbox.add(partial(ctx.publisher.planner, run.id, run.version))
        return result
    details = {
        "tool": cmd.tool,
        "attempt": attempt,
        "current_attempt": cmd.attempts,
        "command_status": cmd.status,
        "status": late.status.value,
        "code": late.code,
    }
    if result == "superseded":
        if recorded is not None:
            details |= {"effect": "already_recorded", "recorded_attempt": recorded}
        _trace(s, run, cmd, [("tool.attempt.superseded", details)])
        return result
    found = "applied" if late.status is Outcome.SUCCEEDED else "unknown"
    _correct(s, run, cmd, late, attempt, prior, found)
    events = [("effect.found_late", {**details, "effect": found})]
    if result == "late_recorded":
        _trace(s, run, cmd, events)
        return result
    s.flush()
    enter_handoff(
        s,
        run,
        reason=StopReason.UNKNOWN_EFFECT.value,
        registry=ctx.registry,
        events=events,
        late_effect=True,
    )
    return result


def _correct(
    s: Session, run: Run, cmd: Command, late: ToolResult, attempt: int, prior: Any, found: str
) -> None:
    """Record what the attempt found: its outcome if none was recorded, else a corrected
    verdict on the recorded one (with a reconciliation row saying it came late)."""
    if prior is None:
        record_outcome(
            s,
            command_id=cmd.id,
            run_id=run.id,
            status=late.status.value,
            code=late.code or "LATE_ATTEMPT",
            retryable=False,
            message=late.message,
            output=late.output,
            attempt=attempt,
        )
        return
    resolve_outcome(prior, "applied" if found == "applied" else "handoff", stamp=False)
    s.add(
        Reconciliation(
            run_id=run.id,
            command_id=cmd.id,
            attempt=prior.reconcile_attempts + 1,
            result=f"{found}_late",
            detail={"attempt": attempt, "code": late.code},
        )
    )


def _trace(s: Session, run: Run, cmd: Command, events: list[tuple[str, dict[str, Any]]]) -> None:
    append_events(s, run.id, events, step=cmd.step, proposal_id=cmd.proposal_id)
