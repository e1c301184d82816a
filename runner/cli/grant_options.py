"""``warrant run grant``'s time options: ``--for 1h30m`` (a duration, counted from the
database's now when the grant is added) and ``--expires-at`` (an ISO 8601 instant, UTC unless
it names an offset)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from warrant.runner.errors import InvalidRequest

__all__ = ["parse_duration", "parse_instant"]

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(value: str) -> float:
    """``90s``, ``15m``, ``1h30m``, ``2d``, or plain seconds; else :class:`InvalidRequest`
    ``DURATION_INVALID``."""
    text = value.strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise InvalidRequest(
                f"not a duration like 90s, 15m, 1h30m or 2d: {value!r}", code="DURATION_INVALID"
            ) from None
        seconds = sum(float(n) * _SECONDS[u] for n, u in parts)
    if not seconds > 0:
        raise InvalidRequest(f"a duration must be positive: {value!r}", code="DURATION_INVALID")
    return seconds


def parse_instant(value: str) -> datetime:
    """An ISO 8601 datetime (UTC unless it names an offset); else :class:`InvalidRequest`
    ``INVALID_DATE``."""
    try:
        instant = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidRequest(f"not an ISO 8601 datetime: {value!r}", code="INVALID_DATE") from None
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)
