"""The opaque cursor of ``GET /v1/runs``: the last ``(created_at, id)`` of a page."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from warrant.runner.errors import InvalidRequest

__all__ = ["decode_cursor", "encode_cursor"]


def encode_cursor(created_at: datetime, run_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position ``cursor`` names; ``422 CURSOR_INVALID`` if it names none."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, run_id = json.loads(raw)
        created_at = datetime.fromisoformat(at)
        if created_at.tzinfo is None or not isinstance(run_id, str) or "\x00" in run_id:
            raise ValueError("not a cursor")
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise InvalidRequest("cursor is not one this API returned", code="CURSOR_INVALID") from None
    return created_at, run_id
