"""Who calls, and whether they may: ``Authorization: Bearer <token>`` → an
:class:`~warrant.runner.authz.Identity` (``401 TOKEN_INVALID`` if missing, unknown or revoked),
then its role against the operation's action (``403 FORBIDDEN``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from warrant.runner.authz import Action, Identity, Role, allowed, name_of, require
from warrant.runner.client.approvals import Origin
from warrant.runner.errors import Forbidden, TokenInvalid

__all__ = [
    "Deps",
    "Reader",
    "authenticated",
    "check_may_reveal",
    "check_own_run",
    "deps",
    "origin",
    "requires",
]

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="An API token (`warrant token create NAME --role ROLE`).",
)


@dataclass(frozen=True)
class Deps:
    """What the routes use, kept on ``app.state.deps``."""

    client: Any
    """The :class:`~warrant.runner.client.api.Client`."""
    tokens: Any
    """The :class:`~warrant.runner.client.tokens.Tokens` that authenticate tokens."""
    operator_token: str | None
    """Passed to the client's operator calls (the HTTP roles replace that check)."""


def deps(request: Request) -> Deps:
    found: Deps = request.app.state.deps
    return found


def authenticated(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Identity:
    """The caller's identity; ``401 TOKEN_INVALID`` without a valid bearer token."""
    if credentials is None or not credentials.credentials:
        raise TokenInvalid("an API token is required (Authorization: Bearer <token>)")
    identity: Identity = deps(request).tokens.authenticate(credentials.credentials)
    return identity


def requires(action: Action) -> Callable[..., Identity]:
    """A dependency: the caller's identity, if its role may take ``action`` (else 403)."""

    def dependency(identity: Annotated[Identity, Depends(authenticated)]) -> Identity:
        require(identity, action)
        return identity

    dependency.__name__ = f"requires_{action.value}"
    return dependency


Reader = Annotated[Identity, Depends(requires(Action.READ))]


def check_own_run(client: Any, identity: Identity, run_id: str) -> None:
    """A producer acts only on the runs it started (``403 NOT_YOUR_RUN``); other roles on any."""
    if identity.role is Role.PRODUCER:
        started_by = client.get_run(run_id).started_by
        if started_by is None or name_of(started_by) != identity.name:
            raise Forbidden(f"{identity.label} did not start run {run_id}", code="NOT_YOUR_RUN")


def check_may_reveal(identity: Identity) -> None:
    """Sensitive values only for a role that may confirm (``403 REVEAL_FORBIDDEN``)."""
    if not allowed(identity.role, Action.CONFIRM):
        raise Forbidden(
            f"{identity.label} may not see sensitive values (only a role that may confirm)",
            code="REVEAL_FORBIDDEN",
        )


def origin(request: Request, via: str) -> Any:
    """Where a request came from (:class:`~warrant.runner.client.approvals.Origin`): the peer
    address uvicorn reports (behind a proxy, run uvicorn with ``--proxy-headers``)."""
    address = request.client.host if request.client else None
    return Origin(via=via, address=address, user_agent=request.headers.get("user-agent"))
