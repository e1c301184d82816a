"""Refusals that ask: which gate refusals pause a run for a grant, what it waits for, and the
state machine's way in and out of ``waiting_grant`` (pure; no services)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.gate import grant, run
from warrant.runner import run_machine as machine
from warrant.runner.codes import Phase, Rejection, RunStatus, StopReason
from warrant.runner.permission_wait import asks_for_grant, grant_request, needed_resources
from warrant.runner.run_machine import IllegalTransition, Stop
from warrant.runner.spec import RunSpec
from warrant.tools._plugins import registry_for

REGISTRY = registry_for()
WRITE = REGISTRY.get("write_artifact", "1")


@pytest.mark.parametrize(
    ("option", "code", "asks"),
    [
        ("ask", "MISSING_CAPABILITY", True),
        ("ask", "RESOURCE_OUT_OF_SCOPE", True),
        ("ask", "GRANT_EXHAUSTED", False),
        ("ask", "GRANT_EXPIRED", False),
        ("ask", "RESOURCE_INVALID", False),
        ("ask", "UNKNOWN_TOOL_OR_VERSION", False),
        ("replan", "MISSING_CAPABILITY", False),
        (None, "MISSING_CAPABILITY", False),
    ],
)
def test_only_a_grant_curable_refusal_asks_and_only_when_the_spec_says_so(option, code, asks):
    assert asks_for_grant(option, code) is asks


def test_the_spec_option_defaults_to_replan_and_refuses_anything_else():
    base = {"goal": "g", "subject": "s", "planner": {"kind": "fixture", "outputs": []}}
    assert RunSpec.model_validate(base).policy.on_missing_grant == "replan"
    spec = RunSpec.model_validate({**base, "policy": {"on_missing_grant": "ask"}})
    assert spec.policy.on_missing_grant == "ask"
    with pytest.raises(ValidationError):
        RunSpec.model_validate({**base, "policy": {"on_missing_grant": "always"}})
    with pytest.raises(ValidationError):
        RunSpec.model_validate({**base, "policy": {"on_missing": "ask"}})


def test_the_request_names_the_tool_the_missing_capability_and_the_resource():
    assert WRITE is not None
    args = {"path": "run-output/a.md", "content": "x"}
    request = grant_request(
        code=Rejection.MISSING_CAPABILITY.value,
        tool=WRITE,
        arguments=args,
        subject="alice",
        grants=[grant("search:public", "public")],
        step=3,
        proposal_id="p3",
        proposal_hash="h" * 64,
    )
    assert request == {
        "code": "MISSING_CAPABILITY",
        "source": "gate",
        "tool": "write_artifact",
        "tool_version": "1",
        "capabilities": ["artifact:write"],
        "capability": "artifact:write",
        "resources": ["run-output/a.md"],
        "step": 3,
        "proposal_id": "p3",
        "proposal_hash": "h" * 64,
    }
    # out of scope: the capability is held, but a grant for this resource is what is missing
    out_of_scope = grant_request(
        code=Rejection.RESOURCE_OUT_OF_SCOPE.value,
        tool=WRITE,
        arguments=args,
        subject="alice",
        grants=[grant("artifact:write", "reports/*")],
        step=3,
        proposal_id="p3",
        proposal_hash=None,
    )
    assert out_of_scope["capabilities"] == ["artifact:write"]


def test_typed_resources_list_every_value():
    tools = [t for t in REGISTRY if t.resources]
    if not tools:
        pytest.skip("no built-in tool with typed resources")
    tool = tools[0]
    name = sorted(tool.resources)[0]
    assert needed_resources(tool, {name: ["a", "b"]}, "alice") == ["a", "b"]


def test_the_machine_waits_and_resumes_at_the_policy_stage():
    view = run(status=RunStatus.RUNNING, version=4)
    request = {"tool": "write_artifact", "capability": "artifact:write"}
    change = machine.request_grant(view, request=request)
    assert change.target is RunStatus.WAITING_GRANT
    assert change.changes["stop_reason"] == StopReason.GRANT_REQUIRED.value
    assert change.changes["stop_detail"] == request
    assert change.changes["phase"] == Phase.IDLE.value
    assert ("grant.requested", request) in change.events
    waiting = run(status=RunStatus.WAITING_GRANT, version=5)
    resumed = machine.resume_after_grant(waiting, added={"grant_id": 7, "by": "ops"})
    assert resumed.target is RunStatus.RUNNING
    assert resumed.changes["phase"] == Phase.POLICY.value  # the same proposal, not re-planned
    assert resumed.changes["stop_reason"] is None and resumed.changes["stop_detail"] is None
    # past its deadline it fails, as every deadline ends a run; it can be cancelled
    stopped = machine.stop(
        waiting, Stop(RunStatus.FAILED, StopReason.DEADLINE_REACHED), step=waiting.step
    )
    assert stopped.target is RunStatus.FAILED
    assert machine.cancel(waiting, in_flight=False, requested={}).target is RunStatus.CANCELLED
    with pytest.raises(IllegalTransition):
        machine.resume_after_grant(view, added={})
    with pytest.raises(IllegalTransition):
        machine.request_grant(waiting, request=request)


def test_run_show_says_which_grant_the_run_waits_for_and_the_command():
    from warrant.runner.cli.run_shown import waiting_for, why, why_lines

    info = {
        "run_id": "r1",
        "status": "waiting_grant",
        "stop_reason": "GRANT_REQUIRED",
        "waiting_for_grant": {
            "tool": "write_artifact",
            "capability": "artifact:write",
            "resources": ["run-output/a.md"],
            "step": 2,
            "proposal_hash": "c" * 64,
        },
    }
    wait = waiting_for(info, [])
    assert wait is not None and wait["kind"] == "grant"
    assert wait["command"] == (
        "warrant run grant r1 --capability artifact:write --scope run-output/a.md --by NAME"
    )
    lines = why_lines(why(info, []))
    assert lines[0] == "waiting_grant: GRANT_REQUIRED"
    assert lines[1] == (
        "waits for a grant of artifact:write for write_artifact on run-output/a.md "
        "(proposal cccccccccccc, step 2)"
    )
    assert lines[2].strip() == wait["command"]
