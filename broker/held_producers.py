"""The producers threads keep of their own (:meth:`warrant.broker.publish.Publisher._producer`):
how many a process may hold, and their release when a thread's locals go."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_HELD_PRODUCERS", "HeldProducer", "Holders"]

#: Threads per process that keep a producer on a broker connection of their own (see
#: :meth:`Publisher._producer`); a stage worker's pool child has one thread.
DEFAULT_HELD_PRODUCERS = 4


class Holders:
    """How many threads of each process hold a publisher's producer (a fork starts at
    none)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._count: dict[int, int] = {}

    def take(self, pid: int) -> bool:
        with self._lock:
            if self._count.get(pid, 0) >= self.limit:
                return False
            self._count[pid] = self._count.get(pid, 0) + 1
            return True

    def give_back(self, pid: int) -> None:
        with self._lock:
            self._count[pid] = max(0, self._count.get(pid, 0) - 1)


class HeldProducer:
    """One thread's producer on a broker connection of its own. Closed, and its slot given
    back, by :meth:`close` (a failed publish) or when the thread's locals are dropped (the
    thread ended: an executor's short-lived thread never leaves its connection open)."""

    def __init__(self, producer: Any, give_back: Callable[[], None]) -> None:
        self.producer = producer
        self._give_back: Callable[[], None] | None = give_back

    def close(self) -> None:
        give_back, self._give_back = self._give_back, None
        if give_back is None:
            return
        give_back()
        with contextlib.suppress(Exception):
            connection = self.producer.connection
            self.producer.close()
            connection.close()

    def __del__(self) -> None:
        self.close()
