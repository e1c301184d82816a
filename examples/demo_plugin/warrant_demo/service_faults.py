"""The demo service's fault injection: faults switched on per tool and consumed atomically
(tests and the demo inject them into worker processes), and every call logged.

``slow``                   the service takes ``delay_s`` before acting: one statement
                           blocked in a socket read (``pg_sleep`` on its database), which
                           the worker's interruption cancels (``ToolContext.on_interrupt``)
``hang``                   one plain ``time.sleep(delay_s)`` before acting: blocked where no
                           interruption reaches (the threads pool reports it)
``transient``              fail retryably, with ``retry_after_s``
``timeout_before_commit``  the call times out and nothing was written
``timeout_after_commit``   the effect is committed, then the response is lost
``slow_after_commit``      the effect is committed, then the call hangs ``delay_s``
``corrupt_read``           a later read-back returns other content (postcondition tests)
``reject``                 a business refusal (``ToolRejected``)
``fail``                   a known, permanent failure, e.g. a missing resource
``crash``                  an unclassified exception (a bug in the adapter)
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    delete,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from warrant.runner.errors import ToolFailed, ToolInterrupted, ToolRejected, ToolUnknown
from warrant_demo.service_jobs import SETTLE_FAULTS

__all__ = [
    "CALL_FAULTS",
    "FAULT_MODES",
    "Fault",
    "FaultsService",
    "OnInterrupt",
    "calls",
    "served",
]

FAULT_MODES = (
    "slow",
    "hang",
    "transient",
    "timeout_before_commit",
    "timeout_after_commit",
    "slow_after_commit",
    "corrupt_read",
    "reject",
    "fail",
    "crash",
    *SETTLE_FAULTS,
)
#: The modes consumed before the call acts (``corrupt_read`` is consumed by read-backs, the
#: settle faults by a refund job's creation: ``warrant_demo.service_jobs``).
CALL_FAULTS = tuple(m for m in FAULT_MODES if m != "corrupt_read" and m not in SETTLE_FAULTS)
#: The outcomes the service decides on a key's first request; a repeat gets the stored answer.
_DECIDED = frozenset({"reject", "fail"})

#: ``ToolContext.on_interrupt``: register what unblocks a wait when the worker interrupts it.
OnInterrupt = Callable[[Callable[[], None]], Callable[[], None]]

metadata = MetaData()

faults = Table(
    "demo_faults",
    metadata,
    Column("tool", String(100), primary_key=True),
    Column("mode", String(32), nullable=False),
    Column("remaining", Integer, nullable=False),
    Column("delay_s", Float, nullable=False, server_default="0"),
    Column("retry_after_s", Float),
)
calls = Table(
    "demo_calls",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tool", String(100), nullable=False),
    Column("idempotency_key", String(128)),
    Column("fault", String(32)),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
    Column("finished_at", DateTime(timezone=True)),
)
#: The call (``demo_calls`` row) this thread's service method is serving.
_serving = threading.local()
_Method = TypeVar("_Method", bound=Callable[..., Any])


def served(method: _Method) -> _Method:
    """A service method whose call's row gets ``finished_at`` when it returns or raises: the
    service's own record of how long it served each call (how many at once, whether one key
    was served twice at the same time)."""

    @functools.wraps(method)
    def serving(self: Any, *args: Any, **kwargs: Any) -> Any:
        _serving.call_id = None
        try:
            return method(self, *args, **kwargs)
        finally:
            call_id, _serving.call_id = getattr(_serving, "call_id", None), None
            if call_id is not None:
                with contextlib.suppress(Exception), self.engine.begin() as conn:
                    done = update(calls).where(calls.c.id == call_id)
                    conn.execute(done.values(finished_at=func.now()))

    return serving  # type: ignore[return-value]


@dataclass(frozen=True)
class Fault:
    mode: str
    delay_s: float = 0.0
    retry_after_s: float | None = None


def _known_cancelled(is_cancelled: Callable[..., bool]) -> bool:
    """Is the run cancelled (asked of the ledger)? The cancel's own interruption may land
    while this asks: it is delivered once, so asking again gets the answer."""
    try:
        return bool(is_cancelled(fresh=True))
    except Exception:
        return bool(is_cancelled(fresh=True))


class FaultsService:
    """The fault half of :class:`~warrant_demo.service.DemoService`."""

    engine: Engine

    def ensure_schema(self) -> None:
        raise NotImplementedError

    def _faults_schema(self) -> None:
        metadata.create_all(self.engine)
        have = {c["name"] for c in inspect(self.engine).get_columns("demo_calls")}
        if "finished_at" not in have:  # a table made before calls had an end
            with self.engine.begin() as conn:
                conn.execute(text("ALTER TABLE demo_calls ADD COLUMN finished_at timestamptz"))

    # --- fault injection -------------------------------------------------------------------

    def set_fault(
        self,
        tool: str,
        mode: str,
        *,
        times: int = 1,
        delay_s: float = 0.0,
        retry_after_s: float | None = None,
    ) -> None:
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}; one of {', '.join(FAULT_MODES)}")
        self.ensure_schema()
        values = {
            "tool": tool,
            "mode": mode,
            "remaining": times,
            "delay_s": delay_s,
            "retry_after_s": retry_after_s,
        }
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(faults)
                .values(**values)
                .on_conflict_do_update(index_elements=[faults.c.tool], set_=values)
            )

    def clear_faults(self) -> None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            conn.execute(delete(faults))

    def _take_fault(self, tool: str, modes: tuple[str, ...] | None = None) -> Fault | None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            q = update(faults).where(faults.c.tool == tool, faults.c.remaining > 0)
            if modes:
                q = q.where(faults.c.mode.in_(modes))
            row = conn.execute(
                q.values(remaining=faults.c.remaining - 1).returning(
                    faults.c.mode, faults.c.delay_s, faults.c.retry_after_s
                )
            ).first()
        return Fault(row[0], row[1], row[2]) if row else None

    def _before(
        self,
        tool: str,
        key: str | None,
        is_cancelled: Callable[..., bool],
        on_interrupt: OnInterrupt | None = None,
        *,
        stored: Callable[[], object | None] | None = None,
    ) -> Fault | None:
        """The call's fault, if one is switched on. ``stored`` looks the key's effect up: a
        request whose key already took effect is answered from the idempotency store, as
        payment APIs do, so a business refusal or a missing resource (decided on the first
        request) cannot come back for it; transport faults still can."""
        try:
            fault = self._take_fault(tool, CALL_FAULTS)
            if fault is not None and fault.mode in _DECIDED and stored and stored() is not None:
                fault = None
            with self.engine.begin() as conn:
                _serving.call_id = conn.execute(
                    insert(calls)
                    .values(tool=tool, idempotency_key=key, fault=fault.mode if fault else None)
                    .returning(calls.c.id)
                ).scalar_one()
            if fault is not None and fault.mode == "slow":
                self._busy(fault.delay_s, on_interrupt)
            if fault is not None and fault.mode == "hang":
                time.sleep(fault.delay_s)
        except Exception:
            # Interrupted (a revoke, a time limit) anywhere before the request was sent —
            # also while the call was being logged: if the run was cancelled, this call is
            # known not to have taken effect.
            if not _known_cancelled(is_cancelled):
                raise
            raise ToolFailed("cancelled before the write", code="CANCELLED_BEFORE_WRITE") from None
        if fault is None:
            return None
        if fault.mode == "slow" and _known_cancelled(is_cancelled):
            raise ToolFailed("cancelled before the write", code="CANCELLED_BEFORE_WRITE")
        if fault.mode == "reject":
            raise ToolRejected("the service refused the request", code="REQUEST_REFUSED")
        if fault.mode == "fail":
            raise ToolFailed("no such resource", code="RESOURCE_NOT_FOUND")
        if fault.mode == "crash":
            raise RuntimeError("adapter bug")
        if fault.mode == "transient":
            raise ToolFailed(
                "service temporarily unavailable",
                code="SERVICE_UNAVAILABLE",
                retryable=True,
                retry_after_s=fault.retry_after_s,
            )
        if fault.mode == "timeout_before_commit":
            raise ToolUnknown("timed out waiting for the service", code="SERVICE_TIMEOUT")
        return fault

    def _busy(self, seconds: float, on_interrupt: OnInterrupt | None) -> None:
        """The service working for ``seconds``: one statement, blocked in a socket read as
        real I/O is. The caller's interruption cancels the statement (a thread-safe cancel
        request to the server); the call then raises ``ToolInterrupted``. A signal's exception
        (a prefork tool's time limit or cancel) ends the wait with the statement still running:
        that connection is dropped, not rolled back (which would fail, and hide the exception)."""
        cancelled: list[bool] = []
        with self.engine.connect() as conn:
            raw: Any = conn.connection.driver_connection

            def cancel() -> None:
                cancelled.append(True)
                raw.cancel_safe()

            undo = on_interrupt(cancel) if on_interrupt is not None else (lambda: None)
            try:
                conn.execute(text("SELECT pg_sleep(:s)"), {"s": seconds})
            except BaseException:
                # The statement may still be running (an exception landed inside the wait):
                # drop the connection rather than roll back on it (which fails).
                conn.invalidate()
                if cancelled:
                    raise ToolInterrupted("the call was interrupted") from None
                raise
            finally:
                undo()

    @staticmethod
    def _after_commit(fault: Fault | None, what: str) -> None:
        if fault is None:
            return
        if fault.mode == "slow_after_commit":
            time.sleep(fault.delay_s)
        if fault.mode == "timeout_after_commit":
            raise ToolUnknown(
                f"the response was lost after the {what} was committed", code="SERVICE_TIMEOUT"
            )

    def call_count(self, tool: str) -> int:
        self.ensure_schema()
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    select(func.count()).select_from(calls).where(calls.c.tool == tool)
                ).scalar_one()
            )

    def corrupt_read(self, tool: str) -> bool:
        """Consume a ``corrupt_read`` fault for ``tool`` if one is set."""
        return self._take_fault(tool, ("corrupt_read",)) is not None
