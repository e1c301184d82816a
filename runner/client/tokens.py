"""API tokens of the HTTP API: created and revoked by administrators (``warrant token …``),
presented by producers, approvers, operators and viewers.

A token is ``wrt_`` followed by 43 URL-safe characters (32 random bytes). It is shown once, when
it is created; the ledger keeps only its sha256, so a token that is lost is revoked and
replaced, never recovered.
"""

from __future__ import annotations

import builtins
import hmac
import secrets
import uuid
from typing import Any

from sqlalchemy import Engine

from warrant.ledger.db import retry_once_on_disconnect, session_scope
from warrant.ledger.models import ApiToken
from warrant.ledger.operator import active_token, insert_token, lock_tokens, mark_revoked, tokens
from warrant.runner.authz import Identity, Role, parse_role
from warrant.runner.canonical import sha256_hex
from warrant.runner.errors import IdAmbiguous, InvalidRequest, NotFound, TokenInvalid

__all__ = ["TOKEN_PREFIX", "Tokens", "hash_token"]

#: Every token starts with it (a token found in a log or a repository is recognisable).
TOKEN_PREFIX = "wrt_"
_NAME_CHARS = 200


def hash_token(token: str) -> str:
    """What the ledger keeps of a token: the sha256 (hex) of its text."""
    return sha256_hex(token)


class Tokens:
    """Creates, lists and revokes API tokens, and turns a presented token into an
    :class:`~warrant.runner.authz.Identity`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, name: str, role: Role | str, *, created_by: str) -> tuple[str, dict[str, Any]]:
        """A new token for ``name`` with ``role``: (the token, its record). The token's text
        is returned here only; :class:`InvalidRequest` for an unknown role (``UNKNOWN_ROLE``)
        or a missing or overlong name (``TOKEN_NAME_INVALID``)."""
        name = name.strip()
        if not name or len(name) > _NAME_CHARS:
            raise InvalidRequest(
                f"a token needs a name of 1 to {_NAME_CHARS} characters", code="TOKEN_NAME_INVALID"
            )
        checked = parse_role(role)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with session_scope(self.engine) as s:
            row = insert_token(
                s,
                token_id=str(uuid.uuid4()),
                name=name,
                role=checked.value,
                token_hash=hash_token(token),
                created_by=created_by,
            )
            return token, _record(row)

    def revoke(self, token: str, *, by: str) -> dict[str, Any]:
        """Revoke a token, named by its id or by its name (as ``token create NAME`` named it):
        it authenticates no more. Revoking it again changes nothing. :class:`NotFound`
        ``TOKEN_NOT_FOUND`` if no token has that id nor an active one that name;
        :class:`IdAmbiguous` ``ID_AMBIGUOUS`` if several active tokens share the name (each
        is then revoked by its id)."""
        with session_scope(self.engine) as s:
            rows = lock_tokens(s, token)
            if not rows:
                raise NotFound(f"no API token with id or name {token}", code="TOKEN_NOT_FOUND")
            if len(rows) > 1:
                ids = [row.id for row in rows]
                raise IdAmbiguous(
                    f"{len(rows)} active tokens are named {token}: revoke one by its id",
                    matches=ids,
                )
            mark_revoked(rows[0], by=by)
            return _record(rows[0])

    @retry_once_on_disconnect
    def authenticate(self, token: str | None) -> Identity:
        """The identity of an active token; :class:`TokenInvalid` if it is missing, unknown
        or revoked."""
        if not token:
            raise TokenInvalid("an API token is required")
        digest = hash_token(token)
        with session_scope(self.engine) as s:
            row = active_token(s, digest)
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            raise TokenInvalid("unknown or revoked API token")
        return Identity(token_id=row.id, name=row.name, role=Role(row.role))

    @retry_once_on_disconnect
    def list(self) -> builtins.list[dict[str, Any]]:
        """Every token (revoked ones too), oldest first; never a token or its hash."""
        with session_scope(self.engine) as s:
            return [_record(row) for row in tokens(s)]


def _record(row: ApiToken) -> dict[str, Any]:
    def at(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "token_id": row.id,
        "name": row.name,
        "role": row.role,
        "created_by": row.created_by,
        "created_at": at(row.created_at),
        "last_used_at": at(row.last_used_at),
        "revoked_at": at(row.revoked_at),
        "revoked_by": row.revoked_by,
        "active": row.revoked_at is None,
    }
