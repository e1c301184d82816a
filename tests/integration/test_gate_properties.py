"""Property-based: arbitrary and malformed proposals never cross the boundary."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gate import NOW, gate
from warrant.runner import policy
from warrant.runner.canonical import proposal_hash
from warrant.runner.codes import Rejection
from warrant.runner.views import ConfirmationView, GrantView

KNOWN = {r.value for r in Rejection}
INVALID = re.compile(r"^INVALID_[A-Z0-9_]+$")

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.text(max_size=30)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_value = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)
field_names = st.sampled_from(["query", "path", "content", "key", "value", "sudo", "capability"])
field_values = st.one_of(
    json_value,
    st.sampled_from(
        [
            "run-output/a.md",
            "../etc/passwd",
            "answer_language",
            "auto_approve",
            "zh-CN",
            "x" * 41,
            "public",
            "run-output/",
            "citation_style",
        ]
    ),
)
arguments = st.one_of(json_value, st.dictionaries(field_names, field_values, max_size=3))
proposals = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {
            "kind": st.sampled_from(["tool", "final", "clarify", "Tool"]),
            "proposal_id": st.text(min_size=1, max_size=8),
            "tool": st.sampled_from(
                ["search_public", "write_artifact", "save_preference", "shell"]
            ),
            "tool_version": st.sampled_from(["1", "2", ""]),
            "arguments": arguments,
        },
        optional={
            "reason_summary": st.text(max_size=20),
            "source_observation_ids": st.lists(st.text(max_size=5), max_size=2),
            "capability": st.sampled_from(["memory:write", "artifact:write"]),
        },
    ),
)
grants = st.lists(
    st.builds(
        GrantView,
        grant_id=st.integers(1, 5),
        run_id=st.sampled_from(["run-1", "run-2"]),
        capability=st.sampled_from(["search:public", "artifact:write", "memory:write"]),
        resource_scope=st.sampled_from(["*", "public", "run-output/*", "memory:alice/*", "other"]),
        expires_at_step=st.none() | st.integers(0, 3),
        max_uses=st.none() | st.integers(1, 2),
        uses=st.integers(0, 2),
    ),
    max_size=4,
)


def _confirmations(raw: Any) -> st.SearchStrategy[list[ConfirmationView]]:
    hashes = ["0" * 64]
    if isinstance(raw, dict) and isinstance(raw.get("arguments"), dict):
        with contextlib.suppress(Exception):
            hashes.append(
                proposal_hash(str(raw.get("tool")), str(raw.get("tool_version")), raw["arguments"])
            )
    return st.lists(
        st.builds(
            ConfirmationView,
            confirmation_id=st.sampled_from(["c1", "c2"]),
            run_id=st.sampled_from(["run-1", "run-2"]),
            proposal_hash=st.sampled_from(hashes),
            tool=st.sampled_from(["save_preference", "write_artifact"]),
            approved=st.booleans(),
            used=st.booleans(),
            expires_at_step=st.integers(0, 3),
            expires_at=st.sampled_from([NOW - 1, NOW + 100]),
        ),
        max_size=2,
    )


def _holds(decision: policy.Accept, inp: policy.GateInput) -> None:
    tool = decision.tool
    assert inp.registry.get(tool.name, tool.version) is tool
    tool.parse_input(decision.arguments)  # validated input only
    for capability in tool.capabilities:
        assert any(
            g.run_id == inp.run.run_id
            and g.capability == capability
            and g.covers(decision.resource)
            and (g.expires_at_step is None or g.expires_at_step >= inp.run.step)
            and (g.max_uses is None or g.uses < g.max_uses)
            for g in inp.grants
        ), "accepted without a valid grant"
    if tool.confirmation.value != "never":
        match = [c for c in inp.confirmations if c.confirmation_id == decision.confirmation_id]
        assert match, "accepted without a confirmation"
        c = match[0]
        assert c.approved and not c.used and c.run_id == inp.run.run_id
        assert c.proposal_hash == decision.proposal_hash
        assert c.expires_at > NOW and c.expires_at_step >= inp.run.step
    if tool.validate is not None:
        assert tool.validate(tool.parse_input(decision.arguments), inp.run.subject) is None


@settings(max_examples=2000, deadline=None)
@given(data=st.data(), raw=proposals, held=grants)
def test_no_tool_executes_without_grant_and_confirmation(data, raw, held):
    inp = gate(raw, grants=held, confirmations=data.draw(_confirmations(raw)))
    decision = policy.evaluate(inp)  # never raises
    if isinstance(decision, policy.Accept):
        _holds(decision, inp)
    elif isinstance(decision, policy.Reject):
        assert decision.code in KNOWN or INVALID.match(decision.code), decision.code
        assert decision.events[-1].name == "proposal.rejected"
    else:
        assert isinstance(decision, policy.AwaitConfirmation | policy.Halt)


@pytest.mark.services
@pytest.mark.slow
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(outputs=st.lists(proposals, min_size=1, max_size=4))
def test_arbitrary_planner_outputs_over_the_real_pipeline(engine, client, worker, outputs):
    from warrant_demo import scenarios as sc

    from tests import facts
    from warrant.ledger.db import session_scope
    from warrant.ledger.models import Command
    from warrant.runner.errors import SpecError

    spec = sc.spec([*outputs, {"kind": "clarify", "question": "?"}])
    spec["subject"] = "prop-subject"
    try:
        run_id = client.start_run(spec)
    except SpecError as exc:  # e.g. a NUL character: refused at the door, nothing written
        assert exc.code == "SPEC_INVALID"
        return
    info = client.wait(run_id, timeout=30)
    assert info.status in ("completed", "failed", "needs_input"), info
    with session_scope(engine) as s:
        tools = [c.tool for c in s.query(Command).filter_by(run_id=run_id)]
    assert set(tools) <= {"search_public"}  # the only granted capability
    for code in facts.rejection_codes(engine, run_id):
        assert code in KNOWN or INVALID.match(code), code
    assert facts.memory(engine, "prop-subject") == 0
    assert worker.proc.poll() is None
