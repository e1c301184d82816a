"""The tool stage's decisions, pure: fed by its loads (``ledger.stage_loads.load_tool``, the
live registrations, an attempt's recorded outcomes), each says what the stage writes and
publishes; ``broker.tool.stage`` and ``broker.tool.record`` commit and publish it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from warrant.runner.codes import CommandStatus, Outcome, Phase, Rejection, RunStatus
from warrant.runner.tool_outcomes import ToolResult
from warrant.tools._contract import SideEffect
from warrant.tools._deployment import WorkerInfo

__all__ = ["delivery", "late_verdict", "planning", "redirect", "switched_off", "waits_for_slot"]


def planning(row: Any) -> bool:
    """Is the run (a load's row) running and waiting for its planner? A duplicate delivery
    then publishes the planner's message again."""
    return bool(row.status == RunStatus.RUNNING and row.phase == Phase.PLANNING)


def delivery(row: Any, *, version: int, lost: bool, runnable: bool) -> str:
    """What a delivery the claim did not apply to does, from ``load_tool``'s row (None: no
    such command). ``lost``: a ``started`` command's attempt is known lost (its lease ended, or
    its process is gone: ``broker.tool.lease``); ``runnable``: this worker has the command's
    tool version. One of ``ignored``, ``duplicate`` (the planner's message again if
    :func:`planning`), ``discarded``, ``discard`` (an ``issued`` command of a run that stopped:
    discarded now), ``in_flight`` (a live attempt holds it: left alone), ``redirect`` (see
    :func:`redirect`) and ``start`` (a new attempt, or ``unknown`` for a lost one whose tool is
    not safe to re-invoke)."""
    if row is None:
        return "ignored"
    if row.cmd_status == CommandStatus.COMPLETED:
        return "duplicate"
    if row.cmd_status == CommandStatus.DISCARDED:
        return "discarded"
    if not _live(row) or not _current(row, version):
        stopped = not _live(row) and row.cmd_status == CommandStatus.ISSUED
        return "discard" if stopped else "ignored"
    if row.cmd_status == CommandStatus.STARTED and not lost:
        return "in_flight"
    return "start" if runnable else "redirect"


def switched_off(row: Any, *, claimed: bool) -> ToolResult | None:
    """The kill switch at the claim: a command whose tool an operator disabled
    (``cmd_tool_disabled``, read by the claim or the load) and that no earlier attempt started
    (``claimed``: the claim itself started it from ``issued``; else the load found it
    ``issued``) is concluded ``rejected`` ``TOOL_DISABLED``, the tool never called. One an
    earlier attempt started is left to its course: its effect may already have happened."""
    if not getattr(row, "cmd_tool_disabled", False):
        return None
    if not claimed and row.cmd_status != CommandStatus.ISSUED:
        return None
    message = f"an operator disabled the tool {row.cmd_tool}: the command was not run"
    return ToolResult(Outcome.REJECTED, Rejection.TOOL_DISABLED.value, message)


def _live(row: Any) -> bool:
    """May the run's command run? The run is running; a parallel step's call also while the
    run reconciles a sibling call's effect (the calls are independent: the step merges once
    that effect is known, with every call's outcome)."""
    branch = bool(getattr(row, "cmd_branch", 0))
    return row.status == RunStatus.RUNNING or (branch and row.status == RunStatus.RECONCILING)


def _current(row: Any, version: int) -> bool:
    """Is the message current? The run is still at its version; a parallel step's branch
    (``cmd_branch`` > 0) stays current while its siblings' outcomes move the run on (its
    command's own status says whether it still runs)."""
    return bool(row.version == version or getattr(row, "cmd_branch", 0))


def waits_for_slot(row: Any, *, version: int) -> bool:
    """A message that found its tool's shared limit full: is its command still waiting to run
    (then it is sent again for later)? Otherwise the stage sorts the message out, slotless."""
    return bool(
        row is not None
        and _live(row)
        and _current(row, version)
        and row.cmd_status in (CommandStatus.ISSUED, CommandStatus.STARTED)
    )


# -- A command for a tool version this worker does not have: leave it for a worker that does.
#
# During a rolling upgrade the workers consuming ``tool.<name>`` may hold different versions of
# the tool (old hosts ``@1``, upgraded ones ``@2``); the queue is shared, so a ``@1`` command can
# reach an upgraded host. That worker must not fail the run and cannot run a contract it does
# not have. It publishes the same message again and traces ``tool.delivery.redirected``; the
# command stays ``issued`` (or ``started`` by its holder), so nothing is lost and nothing runs
# twice. With a live worker that has the version, the message comes back at once; with none
# (every old host already gone), every :data:`NONE_LIVE_RETRY_S` seconds, until a worker with
# the version registers or the run ends. The gate refuses new proposals for a version no
# consumer has (``TOOL_NOT_DEPLOYED``).

#: Countdown of the re-published message when some live worker has the version.
SOME_LIVE_RETRY_S = 0.5
#: ... and when none has it (yet).
NONE_LIVE_RETRY_S = 10.0


def redirect(row: Any, workers: Iterable[WorkerInfo]) -> tuple[list[str], float]:
    """The live workers able to run the command's tool version (their nodes, sorted) and the
    countdown of its message sent again."""
    key, queue = f"{row.cmd_tool}@{row.cmd_tool_version}", f"tool.{row.cmd_tool}"
    capable = sorted(w.node for w in workers if queue in w.queues and key in w.tools)
    return capable, SOME_LIVE_RETRY_S if capable else NONE_LIVE_RETRY_S


# -- An attempt that finishes after its command moved on (``broker.tool.lease.record_late``).


def late_verdict(
    *,
    status: Outcome,
    code: str | None,
    output: Any,
    attempt: int,
    side_effect: SideEffect,
    prior: Any,
    outcomes: list[Any],
    run_status: RunStatus,
    same_command: bool,
) -> tuple[str, int | None]:
    """What a no-longer-current attempt's outcome (``status``, ``code``, ``output``) is, given
    ``prior`` (the outcome recorded for that attempt, if any) and ``outcomes`` (all of the
    command's): the stage's result and, for ``superseded``, the attempt that already recorded
    its effect (None if none did).

    ``duplicate``: its own record, committed before a lost connection hid the commit from it.
    ``superseded``: a read, or a write known not applied; an effect another attempt of the
    command already recorded as applied (same command, so the same idempotency token: the same
    output, or an idempotent write's uncertain outcome); or its own ``unknown`` outcome still
    unresolved (the reconciler's status query will find the effect). Otherwise the ledger must
    not keep saying the effect did not happen: the outcome is corrected, and ``late_recorded``
    when the run is back on this very command (its next attempt reuses the token, so it finds
    the same effect) or already handed off, else ``late_handoff`` (a person looks)."""
    if prior is not None and (prior.status, prior.code) == (status.value, code):
        return "duplicate", None
    write = side_effect is not SideEffect.READ
    if not write or status not in (Outcome.SUCCEEDED, Outcome.UNKNOWN):
        return "superseded", None
    for other in outcomes:
        if other.attempt == attempt:
            continue
        if not (other.status == Outcome.SUCCEEDED.value or other.resolved_status == "applied"):
            continue
        if status is Outcome.SUCCEEDED and other.output == output:
            return "superseded", int(other.attempt)
        if status is Outcome.UNKNOWN and side_effect is SideEffect.IDEMPOTENT_WRITE:
            return "superseded", int(other.attempt)
    if prior is not None and prior.status == Outcome.UNKNOWN.value and not prior.resolved_status:
        return "superseded", None
    if (same_command and not run_status.terminal) or run_status is RunStatus.HANDOFF:
        return "late_recorded", None
    return "late_handoff", None
