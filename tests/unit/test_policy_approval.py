"""The deployment policy (G21, ``WARRANT_POLICY_APPROVAL``): one hash over every tool contract
and the settings the gate reads, a diff that names what changed, and the gate step that
refuses every proposal while the policy is not approved."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.gate import gate, proposal
from warrant.runner import fan_in, policy
from warrant.runner.policy_version import approval_hash, deployment_policy, form_diff
from warrant.runner.settings import Approvals
from warrant.tools._builtin import BUILTIN_TOOLS
from warrant.tools._contract import ConfirmationPolicy, SideEffect, Tool
from warrant.tools._registry import Registry


def _registry(**changed: Any) -> Registry:
    """The built-in tools, ``save_preference`` with ``changed`` fields."""
    tools: list[Tool[Any, Any]] = [
        dataclasses.replace(t, **changed) if t.name == "save_preference" and changed else t
        for t in BUILTIN_TOOLS
    ]
    return Registry(tools)


def test_the_hash_covers_the_contracts_and_the_gate_settings_only():
    base = deployment_policy(_registry(), Approvals())
    assert len(base.hash) == 64
    assert set(base.form) == {"contracts", "settings"}
    entry = base.form["contracts"]["save_preference@1"]
    assert set(entry) == {"contract", "confirmation", "side_effect", "capabilities"}
    # Nothing policy-relevant changed: another registry object of the same tools, and a
    # setting the gate does not read (approvals floor given but not required: same thing).
    assert deployment_policy(_registry(), Approvals()).hash == base.hash
    assert deployment_policy(_registry(), Approvals(policy_approval="required")).hash == base.hash
    # A contract's confirmation, a relaxed tool, an observed tool, an approvals floor: changed.
    confirm = _registry(confirmation=ConfirmationPolicy.NEVER)
    assert deployment_policy(confirm, Approvals()).hash != base.hash
    for settings in (
        Approvals(relax_confirmation="save_preference"),
        Approvals(observe_tools="*"),
        Approvals(approvals_required="save_preference=2"),
    ):
        assert deployment_policy(_registry(), settings).hash != base.hash, settings


def test_the_policy_is_computed_once_per_registry_and_settings():
    registry = _registry()
    first = deployment_policy(registry, Approvals())
    assert deployment_policy(registry, Approvals()) is first
    assert deployment_policy(registry, Approvals(observe_tools="x")) is not first
    assert approval_hash(registry, Approvals()) is None  # off: nothing to check
    assert approval_hash(registry, Approvals(policy_approval="required")) == first.hash


def test_the_diff_names_what_changed():
    before = deployment_policy(_registry(), Approvals()).form
    after = deployment_policy(
        Registry(
            [
                dataclasses.replace(t, side_effect=SideEffect.IRREVERSIBLE)
                if t.name == "save_preference"
                else t
                for t in BUILTIN_TOOLS
                if t.name != "write_artifact"
            ]
        ),
        Approvals(relax_confirmation="save_preference"),
    ).form
    diff = form_diff(before, after)
    assert diff["tools_removed"] == ["write_artifact@1"] and diff["tools_added"] == []
    [changed] = diff["tools_changed"]
    assert changed["tool"] == "save_preference@1"
    assert changed["fields"]["side_effect"][1] == "irreversible"
    assert diff["settings_changed"] == {"relax_confirmation": [[], ["save_preference"]]}
    assert form_diff(after, after) == {
        "tools_added": [],
        "tools_removed": [],
        "tools_changed": [],
        "settings_changed": {},
    }
    first = form_diff(None, after)  # nothing approved before: every tool is new
    assert first["tools_added"] == sorted(after["contracts"])


def test_an_unapproved_policy_refuses_every_proposal_right_after_the_parse():
    unknown = proposal(tool="shell")
    for raw in (proposal(), unknown):
        inp = dataclasses.replace(gate(raw), policy_approved=False, policy_hash="ab" * 32)
        d = policy.evaluate(inp)
        assert isinstance(d, policy.Reject), d
        assert (d.code, d.layer) == ("POLICY_NOT_APPROVED", "policy_approval")
        assert d.message is not None and f"warrant policy approve {'ab' * 32}" in d.message
        assert [e.name for e in d.events] == ["proposal.parsed", "proposal.rejected"]
    approved = dataclasses.replace(gate(proposal()), policy_approved=True)
    assert isinstance(policy.evaluate(approved), policy.Accept)
    assert isinstance(policy.evaluate(gate(proposal())), policy.Accept)  # None: not checked


def test_each_call_of_a_parallel_step_is_refused_too():
    base = dataclasses.replace(gate(None), policy_approved=False, policy_hash="cd" * 32)
    calls = [proposal(), {**proposal(), "proposal_id": "p2", "arguments": {"query": "other"}}]
    decided = fan_in.gate_calls(base, calls)
    assert [(n, d.code) for n, _, d in decided if isinstance(d, policy.Reject)] == [
        (1, "POLICY_NOT_APPROVED"),
        (2, "POLICY_NOT_APPROVED"),
    ]
