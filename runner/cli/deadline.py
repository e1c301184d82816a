"""A wait's deadline that holds whatever does not answer (``run start --wait``, ``run wait``).

Connect, socket and statement timeouts bound most silences, but not all: a PostgreSQL or a
Redis whose process is frozen (or whose host went silent after the kernel acknowledged the
request) leaves a call waiting for a reply that never comes. Every call of the wait goes
through :meth:`Deadline.call`, which runs it in a daemon thread and gives up on it at the
deadline (``--timeout`` plus :data:`GRACE_S`): :class:`~warrant.runner.errors.WaitTimedOut`,
exit 5. The abandoned thread dies with the process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from warrant.runner.errors import WaitTimedOut

__all__ = ["GRACE_S", "BoundedClient", "Deadline"]

#: How long after ``--timeout`` a call that has not answered is given up on.
GRACE_S = 2.0

_T = TypeVar("_T")


class Deadline:
    """``timeout_s`` (plus :data:`GRACE_S`) from now."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.end = time.monotonic() + timeout_s + GRACE_S

    def call(self, fn: Callable[[], _T], *, what: str) -> _T:
        """``fn()``, or :class:`WaitTimedOut` if it has not returned by the deadline."""
        result: list[Any] = []
        failure: list[BaseException] = []

        def target() -> None:
            try:
                result.append(fn())
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)

        thread = threading.Thread(target=target, name="warrant-wait-call", daemon=True)
        thread.start()
        thread.join(max(0.0, self.end - time.monotonic()))
        if thread.is_alive():
            raise WaitTimedOut(
                f"{what} did not answer within the wait's {self.timeout_s:g} s "
                f"(+{GRACE_S:g} s grace)"
            )
        if failure:
            raise failure[0]
        return result[0]


class BoundedClient:
    """A client whose every method call is bounded by ``deadline`` (attributes that are not
    methods pass through)."""

    def __init__(self, client: Any, deadline: Deadline, *, what: str) -> None:
        self._client = client
        self._deadline = deadline
        self._what = what

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def bounded(*args: Any, **kwargs: Any) -> Any:
            return self._deadline.call(lambda: attr(*args, **kwargs), what=self._what)

        return bounded
