"""API tokens: create, list, revoke, and find an active one by its hash.

Only the sha256 (hex) of a token is stored. Each function works in the caller's session.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from warrant.ledger.models import ApiToken

__all__ = ["TOUCH_EVERY_S", "active_token", "insert_token", "lock_token", "mark_revoked", "tokens"]

#: ``last_used_at`` is written at most this often per token (not on every request: a busy
#: token would serialise its requests on its row).
TOUCH_EVERY_S = 60

_ACTIVE = text(
    """
WITH t AS (
  SELECT id, name, role, token_hash, last_used_at FROM api_tokens
   WHERE token_hash = :token_hash AND revoked_at IS NULL
), touched AS (
  UPDATE api_tokens SET last_used_at = now() FROM t
   WHERE api_tokens.id = t.id
     AND (t.last_used_at IS NULL
          OR t.last_used_at < now() - make_interval(secs => :touch_every_s))
)
SELECT id, name, role, token_hash FROM t
"""
)


def insert_token(
    s: Session, *, token_id: str, name: str, role: str, token_hash: str, created_by: str
) -> ApiToken:
    """A new active token row (flushed: its ``created_at`` is read back)."""
    row = ApiToken(id=token_id, name=name, role=role, token_hash=token_hash, created_by=created_by)
    s.add(row)
    s.flush()
    s.refresh(row)
    return row


def tokens(s: Session) -> Sequence[ApiToken]:
    """Every token, revoked ones too, oldest first."""
    return s.scalars(select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)).all()


def lock_token(s: Session, token_id: str) -> ApiToken | None:
    """The token ``token_id``, locked (``None`` if there is none)."""
    return s.get(ApiToken, token_id, with_for_update=True)


def mark_revoked(token: ApiToken, *, by: str) -> None:
    """Revoke the locked ``token`` now (a revoked one keeps its first revocation)."""
    if token.revoked_at is None:
        token.revoked_at = datetime.now(tz=UTC)
        token.revoked_by = by


def active_token(s: Session, token_hash: str) -> Any | None:
    """The unrevoked token with this hash (``id``, ``name``, ``role``, ``token_hash``) or
    ``None``; its ``last_used_at`` is set to now if older than :data:`TOUCH_EVERY_S`."""
    params = {"token_hash": token_hash, "touch_every_s": TOUCH_EVERY_S}
    return s.execute(_ACTIVE, params).first()
