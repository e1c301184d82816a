"""A tool's own permission refusal that asks: which outcomes pause a run for a grant, what the
run waits for, the state machine's change, and when the command issued again (with its own
token) is reconciled before its call (pure; no services)."""

from __future__ import annotations

import pytest

from tests.gate import run
from tests.permission_tool import TOOL
from warrant.runner.codes import Outcome, Phase, RunStatus, StopReason
from warrant.runner.errors import ToolPermissionDenied, ToolRejected
from warrant.runner.permission_wait import (
    PERMISSION_DENIED,
    GrantWait,
    asks_after_refusal,
    reconcile_first,
    tool_grant_request,
    wait_for_grant,
)
from warrant.runner.run_machine import IllegalTransition
from warrant.runner.tool_outcomes import Interruption, of_error


@pytest.mark.parametrize(
    ("option", "status", "code", "asks"),
    [
        ("ask", Outcome.REJECTED, "TOOL_PERMISSION_DENIED", True),
        ("ask", Outcome.REJECTED, "TOOL_REJECTED", False),  # a business refusal: re-plan
        ("ask", Outcome.FAILED, "TOOL_PERMISSION_DENIED", False),
        ("replan", Outcome.REJECTED, "TOOL_PERMISSION_DENIED", False),
        (None, Outcome.REJECTED, "TOOL_PERMISSION_DENIED", False),
    ],
)
def test_only_a_permission_refusal_asks_and_only_when_the_spec_says_so(option, status, code, asks):
    assert asks_after_refusal(option, status=status, code=code) is asks


def test_the_error_has_a_stable_code_and_names_the_capability_and_the_resource():
    exc = ToolPermissionDenied("403", capability="crm:contacts.update", resource="contacts/7")
    assert isinstance(exc, ToolRejected) and exc.code == PERMISSION_DENIED
    assert exc.to_dict() == {
        "code": "TOOL_PERMISSION_DENIED",
        "message": "403",
        "capability": "crm:contacts.update",
        "resource": "contacts/7",
    }
    result = of_error(TOOL, exc, said="403", seen=Interruption())
    assert (result.status, result.code, result.stop) == (Outcome.REJECTED, PERMISSION_DENIED, None)
    assert result.output == {"capability": "crm:contacts.update", "resource": "contacts/7"}


def test_the_request_has_the_gates_shape_with_the_tools_words():
    request = tool_grant_request(
        tool="crm_update_contact",
        tool_version="1",
        details={"capability": "crm:contacts.update", "resource": "contacts/7" + "x" * 500},
        message="403: not allowed",
        step=2,
        proposal_id="p2",
        proposal_hash="h" * 64,
        command_id="c-1",
        attempt=1,
    )
    assert request == {
        "code": "TOOL_PERMISSION_DENIED",
        "source": "tool",
        "tool": "crm_update_contact",
        "tool_version": "1",
        "capabilities": ["crm:contacts.update"],
        "capability": "crm:contacts.update",
        "resources": ["contacts/7" + "x" * 190],  # the tool's words are bounded
        "message": "403: not allowed",
        "step": 2,
        "proposal_id": "p2",
        "proposal_hash": "h" * 64,
        "command_id": "c-1",
        "attempt": 1,
    }
    bare = tool_grant_request(
        tool="t",
        tool_version="1",
        details=None,
        message=None,
        step=1,
        proposal_id=None,
        proposal_hash=None,
        command_id="c",
        attempt=1,
    )
    assert (bare["capability"], bare["capabilities"], bare["resources"]) == (None, [], [])


def test_the_run_waits_with_its_proposal_pending_again_and_no_active_command():
    view = run(status=RunStatus.RUNNING, phase=Phase.TOOL, version=6)
    request = {"code": PERMISSION_DENIED, "source": "tool", "capability": "crm:contacts.update"}
    done = ("tool.completed", {"status": "rejected", "code": PERMISSION_DENIED})
    change = wait_for_grant(view, GrantWait(request, proposal_pk=41), events=[done])
    assert (change.source, change.target) == (RunStatus.RUNNING, RunStatus.WAITING_GRANT)
    assert change.changes["pending_proposal_id"] == 41  # the grant's resume re-checks it
    assert change.changes["active_command_id"] is None
    assert change.changes["stop_reason"] == StopReason.GRANT_REQUIRED.value
    assert change.changes["stop_detail"] == request
    assert [name for name, _ in change.events][:2] == ["tool.completed", "grant.requested"]
    with pytest.raises(IllegalTransition):  # a cancelling run does not wait
        wait_for_grant(run(status=RunStatus.CANCELLING), GrantWait(request, 41))


def test_the_attempt_after_a_permission_refusal_is_reconciled_first():
    import dataclasses

    assert reconcile_first(TOOL, attempt=2, previous_code=PERMISSION_DENIED)
    assert not reconcile_first(TOOL, attempt=1, previous_code=None)  # a first attempt
    assert not reconcile_first(TOOL, attempt=2, previous_code="TOOL_TIMEOUT")  # a retry
    assert not reconcile_first(TOOL, attempt=3, previous_code=None)
    unverified = dataclasses.replace(TOOL, reconcile=None, unverified=True, unverified_reason="x")
    assert not reconcile_first(unverified, attempt=2, previous_code=PERMISSION_DENIED)
