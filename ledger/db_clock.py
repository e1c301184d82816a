"""The database's clock, read on this host: the one time every host of a deployment shares.

Deadlines, leases and reissue times are stored as the database's timestamps; a host whose own
clock is skewed (issue 30 measured ±120 s) would judge them early or late. A stage's
``ctx.clock()`` is therefore this host's clock corrected by its measured offset from the
database's: ``time.time() + offset``. The offset is measured with one ``SELECT
clock_timestamp()`` (the midpoint of the round trip is taken for the moment the database read
its clock), at first use and every :data:`REFRESH_S`; while the database cannot be reached
the last offset is kept (0 before the first reading), so a silent database never blocks a
caller for longer than one bounded query.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import Engine, text

__all__ = ["REFRESH_S", "DatabaseClock"]

log = logging.getLogger(__name__)

#: Seconds between two readings of the database's clock.
REFRESH_S = 60.0
#: After a failed reading, how long before the next try.
RETRY_S = 5.0


class DatabaseClock:
    """A callable returning the database's current time (epoch seconds), as seen from here."""

    def __init__(self, engine: Engine, *, refresh_s: float = REFRESH_S) -> None:
        self._engine = engine
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._offset = 0.0
        self._next_reading = float("-inf")  # monotonic
        self.readings = 0
        """How many times the offset was measured (for tests and diagnostics)."""

    @property
    def offset_s(self) -> float:
        """The database's clock minus this host's (seconds), as last measured."""
        return self._offset

    def _read(self) -> None:
        before = time.time()
        with self._engine.connect() as conn:
            db_now = conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one()
        after = time.time()
        self._offset = float(db_now) - (before + after) / 2
        self.readings += 1

    def __call__(self) -> float:
        if time.monotonic() >= self._next_reading and self._lock.acquire(blocking=False):
            try:
                self._read()
                self._next_reading = time.monotonic() + self._refresh_s
            except Exception as exc:  # the database may be away: keep the last offset
                log.debug("could not read the database's clock: %s", exc)
                self._next_reading = time.monotonic() + RETRY_S
            finally:
                self._lock.release()
        return time.time() + self._offset
