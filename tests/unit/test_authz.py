"""Roles and actions: the whole matrix of who may do what, and the recorded identity."""

from __future__ import annotations

import pytest

from warrant.runner.authz import (
    ALLOWED,
    Action,
    Identity,
    Role,
    allowed,
    name_of,
    parse_role,
    require,
)
from warrant.runner.errors import Forbidden, InvalidRequest, TokenInvalid, Unauthorized

A = Action
#: The matrix, written out by role (what the issue asks for), checked against ``ALLOWED``.
EXPECTED: dict[Role, set[Action]] = {
    Role.PRODUCER: {A.START_RUN, A.PROPOSE, A.READ, A.CANCEL},
    Role.APPROVER: {A.READ, A.CONFIRM, A.ANSWER},
    Role.OPERATOR: set(Action),
    Role.VIEWER: {A.READ},
}


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("action", list(Action))
def test_the_full_matrix(role: Role, action: Action) -> None:
    assert allowed(role, action) is (action in EXPECTED[role])
    assert allowed(role.value, action.value) is (action in EXPECTED[role])


def test_allowed_lists_every_action_and_no_other_role() -> None:
    assert set(ALLOWED) == set(Action)
    for action, roles in ALLOWED.items():
        assert roles == {r for r, actions in EXPECTED.items() if action in actions}
    assert {a.value for a in Action} == {
        "start_run",
        "propose",
        "read",
        "confirm",
        "answer",
        "cancel",
        "grant",
        "pre_approve",
        "resolve_handoff",
        "revoke_memory",
        "manage_tokens",
        "switch_tools",
        "approve_policy",
        "review_policy",
    }
    with pytest.raises(TypeError):
        ALLOWED[A.READ] = frozenset()  # type: ignore[index]


def test_unknown_roles_and_actions_are_never_allowed() -> None:
    assert not allowed("admin", A.READ)
    assert not allowed(Role.OPERATOR, "delete_everything")
    with pytest.raises(InvalidRequest) as caught:
        parse_role("admin")
    assert caught.value.code == "UNKNOWN_ROLE"
    assert parse_role("viewer") is Role.VIEWER


def test_identity_label_and_require() -> None:
    alice = Identity(token_id="t1", name="alice", role=Role.PRODUCER)
    assert alice.label == "alice (producer)"
    require(alice, A.START_RUN)
    with pytest.raises(Forbidden) as caught:
        require(alice, A.CONFIRM)
    assert caught.value.code == "FORBIDDEN"
    with pytest.raises(AttributeError):
        alice.role = Role.OPERATOR  # type: ignore[misc]
    assert name_of(alice.label) == name_of("alice (approver)") == "alice"
    assert name_of("ops@example.com") == "ops@example.com"
    assert name_of("bob (admin)") == "bob (admin)"


def test_the_errors_sit_under_unauthorized() -> None:
    assert issubclass(Forbidden, Unauthorized) and issubclass(TokenInvalid, Unauthorized)
    assert Forbidden("x").code == "FORBIDDEN" and TokenInvalid("x").code == "TOKEN_INVALID"
    assert not issubclass(Forbidden, TokenInvalid)
