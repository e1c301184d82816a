"""Who may do what: the roles of API tokens and the actions each role may take.

Pure: no token, database or HTTP here. The client's token service
(:mod:`warrant.runner.client.tokens`) turns a presented token into an :class:`Identity`; the
HTTP layer asks :func:`allowed` before calling the client and records :attr:`Identity.label`
as who acted (``by``, ``granted_by``, ``started_by``).

=========  =================================================================
role       actions
=========  =================================================================
producer   start_run, read, cancel (its runs are started, read and stopped)
approver   read, confirm, answer (a person deciding on pending proposals)
operator   every action
viewer     read
=========  =================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from warrant.runner.errors import Forbidden, InvalidRequest

__all__ = [
    "ALLOWED",
    "Action",
    "Identity",
    "Role",
    "allowed",
    "name_of",
    "parse_role",
    "require",
]


class Role(StrEnum):
    PRODUCER = "producer"
    APPROVER = "approver"
    OPERATOR = "operator"
    VIEWER = "viewer"


class Action(StrEnum):
    START_RUN = "start_run"
    PROPOSE = "propose"
    READ = "read"
    CONFIRM = "confirm"
    ANSWER = "answer"
    CANCEL = "cancel"
    GRANT = "grant"
    PRE_APPROVE = "pre_approve"
    RESOLVE_HANDOFF = "resolve_handoff"
    REVOKE_MEMORY = "revoke_memory"
    MANAGE_TOKENS = "manage_tokens"
    SWITCH_TOOLS = "switch_tools"
    """Disable or enable a tool (the kill switch)."""
    APPROVE_POLICY = "approve_policy"
    """Approve the deployment policy (``WARRANT_POLICY_APPROVAL``)."""
    REVIEW_POLICY = "review_policy"
    """Replay a run or review a policy against the recent runs (the decisions, not the data
    of other producers' runs, are shown: an operator's)."""


_BY_ROLE = {
    Role.PRODUCER: {Action.START_RUN, Action.PROPOSE, Action.READ, Action.CANCEL},
    Role.APPROVER: {Action.READ, Action.CONFIRM, Action.ANSWER},
    Role.OPERATOR: set(Action),
    Role.VIEWER: {Action.READ},
}
#: The roles that may take each action (every action is listed; the operator is in each).
ALLOWED: Mapping[Action, frozenset[Role]] = MappingProxyType(
    {
        action: frozenset(r for r, actions in _BY_ROLE.items() if action in actions)
        for action in Action
    }
)


def allowed(role: Role | str, action: Action | str) -> bool:
    """Whether ``role`` may take ``action`` (an unknown role or action may not)."""
    try:
        return Role(role) in ALLOWED[Action(action)]
    except ValueError:
        return False


def parse_role(value: str) -> Role:
    """The role named ``value``; :class:`InvalidRequest` ``UNKNOWN_ROLE`` if there is none."""
    try:
        return Role(value)
    except ValueError:
        names = ", ".join(r.value for r in Role)
        raise InvalidRequest(
            f"unknown role {value!r} (one of {names})", code="UNKNOWN_ROLE"
        ) from None


@dataclass(frozen=True)
class Identity:
    """Who presented a valid token: its id, its name and its role."""

    token_id: str
    name: str
    role: Role

    @property
    def label(self) -> str:
        """What is recorded as who acted: ``"NAME (role)"``."""
        return f"{self.name} ({self.role})"


def name_of(label: str) -> str:
    """Whose ``label`` is: ``"alice (producer)"`` and ``"alice (approver)"`` are both
    ``"alice"``; a label without a role suffix is its own name."""
    for role in Role:
        suffix = f" ({role})"
        if label.endswith(suffix):
            return label[: -len(suffix)]
    return label


def require(identity: Identity, action: Action) -> None:
    """Raise :class:`Forbidden` unless ``identity``'s role may take ``action``."""
    if not allowed(identity.role, action):
        raise Forbidden(f"{identity.label} may not {action.value.replace('_', ' ')}")
