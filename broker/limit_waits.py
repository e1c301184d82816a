"""How the stages wait for the shared limits (:mod:`warrant.broker.limits`), and trace it.

* A **model call** waits in its planner thread (the threads pool) for every limit it is held
  to, until the run's deadline (then ``DEADLINE_REACHED``, as a model call cut by it) or its
  cancel (``broker.planner._run_watch``: no call is made, nothing charged); while
  it waits it marks the run progressed every third of ``WARRANT_STALL_AFTER_S``, so the
  stall sweep does not send the step again. A 429 still backs off as before.
* A **tool call** never waits inside its task: the task's time limits (Celery's parent and
  ``broker.tool.deadline``) count from the task's start, so a wait there would eat the tool's own
  time and could turn a write into ``TOOL_TIMEOUT``/unknown. A message that finds no slot is
  sent again with a countdown (its result is ``limit_deferred``); the attempt (claim,
  ``began``, the deadline its tool sees) starts only once the slot is held. The slot is
  released on every way out of the stage, except after an **abandoned** call (its effect
  unknown, or interrupted by a cancel or its time limit: the service may still be working on
  it): that slot stays taken until the attempt's deadline, by which a service that honours
  the deadline it was given has stopped (:meth:`Slot.keep_until`).

Traced: a command's first deferral appends ``limit.waiting`` ({limit, key, tool}); a call that
waited appends ``limit.waited`` ({limit, key, waited_s}, plus ``deferrals`` for a tool), and
adds the same event to the current span.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from warrant.broker import telemetry
from warrant.broker.limits import FAILURES, Blocked, SharedLimits, Taken, unavailable
from warrant.broker.transitions import tool_message
from warrant.ledger.db import session_scope
from warrant.ledger.repo import append_events
from warrant.ledger.stage_loads import autocommit, load_tool
from warrant.ledger.sweeps import touch_run
from warrant.runner import cancellation
from warrant.runner.limits import ModelLimit
from warrant.runner.planner_protocol import PlannerFailure
from warrant.runner.tool_stage import waits_for_slot

__all__ = ["DEFERRED", "ModelGate", "Slot", "model_limiter", "send_again", "tool_slot"]

log = logging.getLogger("warrant.limits")

#: The tool stage's result for a message sent again for later.
DEFERRED = "limit_deferred"


class ModelGate:
    """:class:`~warrant.runner.limits.ModelLimiter` for one planner step."""

    def __init__(
        self,
        shared: SharedLimits,
        *,
        record: Callable[[list[tuple[str, dict[str, Any]]]], None],
        touch: Callable[[], None],
        touch_every_s: float,
    ) -> None:
        self.shared = shared
        self.record = record
        self.touch = touch
        self.touch_every_s = touch_every_s

    @contextmanager
    def reserve(
        self, *, base_url: str, api_key_env: str | None, tokens: int, deadline_at: float
    ) -> Iterator[Callable[[int], None]]:
        held = self.shared.table.for_model(base_url=base_url, api_key_env=api_key_env)
        taken = self._wait(held, tokens, deadline_at) if held else []

        def settle(used: int) -> None:
            try:
                self.shared.settle(taken, used)
            except FAILURES as exc:
                unavailable(exc, what="settling a model call's tokens")

        yield settle

    def _wait(
        self, held: Sequence[tuple[str, ModelLimit]], tokens: int, deadline_at: float
    ) -> Taken:
        began = last_touch = time.monotonic()
        first: Blocked | None = None
        while True:
            try:
                blocked, taken = self.shared.take_model(held, tokens)
            except FAILURES as exc:
                unavailable(exc, what="a model call")
                blocked, taken = None, []
            if blocked is None:
                self._waited(first, began)
                return taken
            first = first or blocked
            left = deadline_at - time.time()
            if left <= 0:
                self._waited(first, began)
                raise PlannerFailure("DEADLINE_REACHED", calls=0)
            if _pause(min(blocked.retry_in_s, left) + random.uniform(0, 0.02)):
                self._waited(first, began)  # the run is being cancelled: no call to make
                raise PlannerFailure("CANCELLED_WHILE_WAITING", calls=0)
            if time.monotonic() - last_touch >= self.touch_every_s:
                last_touch = time.monotonic()
                self._touch()

    def _touch(self) -> None:
        try:
            self.touch()
        except Exception as exc:  # a ledger hiccup must not end the wait
            log.warning("marking a waiting run progressed failed: %s", exc)

    def _waited(self, first: Blocked | None, began: float) -> None:
        if first is None:
            return
        details = {
            "limit": first.limit,
            "key": first.key,
            "waited_s": round(time.monotonic() - began, 3),
        }
        telemetry.note("limit.waited", **details)
        try:
            self.record([("limit.waited", details)])
        except Exception as exc:
            log.warning("recording a limit wait failed: %s", exc)


def _pause(seconds: float) -> bool:
    """Sleep ``seconds``, or less if the run's cancel signal is set meanwhile (True then)."""
    signal = cancellation.current()
    if signal is None:
        time.sleep(seconds)
        return False
    woken = threading.Event()
    undo = signal.on_set(woken.set)
    try:
        return woken.wait(seconds)
    finally:
        undo()


def model_limiter(ctx: Any, run_id: str, *, step: int) -> ModelGate | None:
    """The gate of one planner step (None: no shared limits in this deployment)."""
    shared: SharedLimits | None = getattr(ctx, "limits", None)
    if shared is None:
        return None

    def record(events: list[tuple[str, dict[str, Any]]]) -> None:
        with session_scope(ctx.engine) as s:
            append_events(s, run_id, events, step=step)

    def touch() -> None:
        with session_scope(ctx.engine) as s:
            touch_run(s, run_id)

    return ModelGate(
        shared, record=record, touch=touch, touch_every_s=ctx.settings.stall_after_s / 3
    )


# --- the tool stage's hook ------------------------------------------------------------------


@dataclass
class Slot:
    """What :func:`tool_slot` yields to the tool stage."""

    deferred: str | None = None
    """The stage's result when the message was sent again for later (then nothing runs)."""
    held_for_s: float = 0.0
    """After the block: how much longer the slot stays taken (an abandoned call)."""

    def keep_until(self, seconds: float) -> None:
        """The call was abandoned with ``seconds`` left before its deadline: the slot stays
        taken that long after the stage ends (a service may still be serving the call)."""
        self.held_for_s = max(self.held_for_s, seconds)


@contextmanager
def tool_slot(
    ctx: Any, *, tool: str | None, run_id: str, version: int, command_id: str
) -> Iterator[Slot]:
    """Around the tool stage: yields a :class:`Slot` (with ``deferred`` set when the message
    was sent again for later, :data:`DEFERRED`); if ``tool`` is capped the slot is held until
    the block ends however it ends, and longer if the stage said so (:meth:`Slot.keep_until`)."""
    shared: SharedLimits | None = getattr(ctx, "limits", None)
    limit = shared.table.for_tool(tool) if shared is not None and tool else None
    slot = Slot()
    if shared is None or limit is None or tool is None:
        yield slot
        return
    holder = uuid.uuid4().hex
    try:
        blocked = shared.take_tool(tool, limit, holder)
    except FAILURES as exc:
        unavailable(exc, what=f"a call of {tool}")
        shared.release_tool(tool, holder)
        blocked, limit = None, None
    if blocked is not None:
        slot.deferred = _defer(
            ctx, shared, blocked, tool=tool, run_id=run_id, version=version, cid=command_id
        )
        yield slot
        return
    try:
        if limit is not None:
            _note_waited(ctx, shared, run_id=run_id, command_id=command_id)
        yield slot
    finally:
        if limit is not None and limit.max_in_flight:
            shared.release_tool(tool, holder, after_s=slot.held_for_s)


def _defer(
    ctx: Any,
    shared: SharedLimits,
    blocked: Blocked,
    *,
    tool: str,
    run_id: str,
    version: int,
    cid: str,
) -> str | None:
    """Send the message again for later, if its command is still waiting to run (else None:
    the stage sorts the message out itself, without a slot)."""
    with autocommit(ctx.engine) as conn:
        row = load_tool(conn, run_id, cid)
    if not waits_for_slot(row, version=version):
        return None
    try:
        first = shared.note_wait(cid, blocked, step=row.cmd_step, proposal=row.cmd_proposal_id)
    except FAILURES as exc:
        unavailable(exc, what=f"a call of {tool}")
        return None
    if first:
        with session_scope(ctx.engine) as s:
            details = {"limit": blocked.limit, "key": blocked.key, "tool": tool}
            append_events(
                s,
                run_id,
                [("limit.waiting", details)],
                step=row.cmd_step,
                proposal_id=row.cmd_proposal_id,
            )
    countdown = blocked.retry_in_s * random.uniform(0.5, 1.5)
    send_again(ctx, row, version=version, tool=tool, countdown=countdown)
    return DEFERRED


def send_again(ctx: Any, row: Any, *, version: int, tool: str, countdown: float) -> None:
    """Publish the tool message of ``row``'s command again, ``countdown`` seconds from now."""
    send = tool_message(
        ctx, row.id, version, row.cmd_id, tool, timeout_s=row.cmd_timeout_s, countdown=countdown
    )
    send()


def _note_waited(ctx: Any, shared: SharedLimits, *, run_id: str, command_id: str) -> None:
    """The slot is held: if the command waited for it, trace how long."""
    try:
        wait = shared.take_wait(command_id)
    except FAILURES as exc:
        unavailable(exc, what="reading a limit wait")
        return
    if wait is None:
        return
    step, proposal_id = wait.pop("step"), wait.pop("proposal_id")
    telemetry.note("limit.waited", **wait)
    with session_scope(ctx.engine) as s:
        append_events(s, run_id, [("limit.waited", wait)], step=step, proposal_id=proposal_id)
