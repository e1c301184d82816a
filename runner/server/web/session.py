"""Who is looking at a page, and whether a form really comes from one of ours.

A person logs in with their API token; it is kept in an ``HttpOnly``, ``SameSite=Strict``
cookie scoped to ``/ui`` and checked against the token store on every request (a revoked token
logs the page out). Identity always comes from that token, never from a form field.

Every form that changes something carries a CSRF value derived from the token
(HMAC-SHA256 keyed by the token's hash): another site cannot read the cookie, so it cannot
compute the value, and no server-side session state is needed (several ``warrant serve``
processes behind one address agree). A request whose ``Origin`` names another host is refused
as well.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import Response

from warrant.runner.authz import Identity
from warrant.runner.errors import Forbidden, TokenInvalid
from warrant.runner.server.http.auth import deps

__all__ = [
    "COOKIE",
    "DEFAULT_SESSION_S",
    "LoginRequired",
    "check_form",
    "csrf_for",
    "forget",
    "identity",
    "remember",
    "safe_next",
    "token_of",
]

COOKIE = "warrant_token"
DEFAULT_SESSION_S = 12 * 3600
"""How long the browser keeps the login (the token's own revocation ends it sooner)."""


class LoginRequired(TokenInvalid):
    """No valid token on a page's request: answered with a redirect to the login form (an
    API call gets ``401 TOKEN_INVALID`` instead)."""

    def __init__(self, next_path: str) -> None:
        super().__init__(f"log in to see {next_path}")
        self.next_path = next_path


def token_of(request: Request) -> str | None:
    return request.cookies.get(COOKIE) or None


def identity(request: Request) -> Identity:
    """The logged-in person; :class:`LoginRequired` without a valid token."""
    token = token_of(request)
    try:
        found: Identity = deps(request).tokens.authenticate(token)
    except TokenInvalid:
        raise LoginRequired(safe_next(str(request.url.path))) from None
    return found


def csrf_for(token: str) -> str:
    key = hashlib.sha256(token.encode()).digest()
    return hmac.new(key, b"warrant-ui-csrf", hashlib.sha256).hexdigest()


def check_form(request: Request, submitted: str | None) -> None:
    """Refuse (``403 CSRF_FAILED``) a form without this session's CSRF value, or from
    another origin."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.url.netloc:
        raise Forbidden(f"a form posted from {origin} is refused", code="CSRF_FAILED")
    token = token_of(request)
    if not token or not submitted or not hmac.compare_digest(csrf_for(token), submitted):
        raise Forbidden(
            "the form's CSRF value is missing or wrong (reload the page)", code="CSRF_FAILED"
        )


def remember(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=DEFAULT_SESSION_S,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def forget(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")


def safe_next(path: str | None) -> str:
    """Where to go after logging in: a path of ours, never another site."""
    if path and path.startswith("/ui/") and not path.startswith("//") and "\\" not in path:
        return path
    return "/ui/inbox"
