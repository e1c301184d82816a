"""The policy version of a gate decision (issue 36 item 4): a changed grant, contract or
setting changes it, and nothing else does."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from tests.gate import grant
from warrant.runner.policy_version import PolicyVersion, contract_hash, policy_version
from warrant.tools._builtin import BUILTIN_TOOLS
from warrant.tools._contract import ConfirmationPolicy, SideEffect, Tool


def _tool(name: str = "save_preference") -> Tool[Any, Any]:
    return next(t for t in BUILTIN_TOOLS if t.name == name)


BASE: dict[str, Any] = {
    "tool": None,
    "grants": (grant("memory:write", "alice/*"), grant("web:search", "public", grant_id=2)),
    "relaxed_tools": frozenset(),
    "approvals_floor": {},
    "run_policy": {"on_missing_grant": "replan"},
}


def version(**changes: Any) -> PolicyVersion:
    return policy_version(**{**BASE, "tool": _tool(), **changes})


def test_the_same_inputs_give_the_same_version_and_it_names_its_parts():
    first, again = version(), version()
    assert first == again
    assert first.contract == contract_hash(_tool())
    assert len(first.version) == 64
    assert set(first.details()) == {
        "policy_version",
        "contract_hash",
        "grants_hash",
        "settings_hash",
    }


@pytest.mark.parametrize(
    ("changes", "part"),
    [
        ({"grants": (grant("memory:write", "alice/x"),)}, "grants"),
        ({"grants": (grant("memory:write", "alice/*", max_uses=1),)}, "grants"),
        ({"grants": (grant("memory:write", "alice/*", expires_at_step=3),)}, "grants"),
        ({"grants": (grant("memory:write", "alice/*", destinations_from=("goal",)),)}, "grants"),
        ({"grants": ()}, "grants"),
        ({"relaxed_tools": frozenset({"save_preference"})}, "settings"),
        ({"approvals_floor": {"save_preference": 2}}, "settings"),
        ({"run_policy": {"on_missing_grant": "ask"}}, "settings"),
    ],
)
def test_a_changed_grant_or_setting_changes_the_version(changes, part):
    before, after = version(), version(**changes)
    assert after.version != before.version
    changed = {
        p for p in ("contract", "grants", "settings") if getattr(after, p) != getattr(before, p)
    }
    assert changed == {part}


@pytest.mark.parametrize(
    "changes",
    [
        {"description": "Remember something else."},
        {"side_effect": SideEffect.IRREVERSIBLE},
        {"capabilities": ("memory:write", "memory:admin")},
        {"confirmation": ConfirmationPolicy.NEVER},
        {"version": "2"},
        {"approvals_required": 3},
        {"self_approval_allowed": True},
        {"sensitive_fields": frozenset({"key"})},
        {"max_input_bytes": 10},
    ],
)
def test_a_changed_contract_changes_the_version(changes):
    changed_tool = dataclasses.replace(_tool(), **changes)
    before, after = version(), version(tool=changed_tool)
    assert after.contract != before.contract and after.version != before.version
    if "capabilities" not in changes:  # new capabilities select other grants too
        assert (after.grants, after.settings) == (before.grants, before.settings)


def test_a_changed_input_schema_changes_the_version():
    from warrant.tools._contract import ToolInput

    class Other(ToolInput):
        key: str
        value: str
        note: str = ""

    before, after = version(), version(tool=dataclasses.replace(_tool(), input_model=Other))
    assert after.contract != before.contract


def test_nothing_else_changes_it():
    before = version()
    # grant ids, use counts and order; grants and settings of other tools
    reordered = tuple(
        dataclasses.replace(g, grant_id=g.grant_id + 10, uses=5) for g in reversed(BASE["grants"])
    )
    assert version(grants=reordered) == before
    assert version(grants=(*BASE["grants"], grant("web:fetch", "*", grant_id=3))) == before
    assert version(relaxed_tools=frozenset({"search_public"})) == before
    assert version(approvals_floor={"search_public": 2}) == before
    # a new tool object with the same contract (another process's registry)
    assert version(tool=dataclasses.replace(_tool())) == before


def test_without_a_tool_every_grant_counts():
    none = policy_version(**BASE)
    assert none.contract is None
    assert policy_version(**{**BASE, "grants": BASE["grants"][:1]}).grants != none.grants


def test_the_contract_is_hashed_once_per_tool_object():
    tool = dataclasses.replace(_tool())
    started = time.perf_counter()
    contract_hash(tool)
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(1000):
        version(tool=tool)
    per_decision = (time.perf_counter() - started) / 1000
    assert per_decision < max(first, 0.001), (first, per_decision)


@pytest.mark.parametrize(
    "run_policy", [{"on_missing_grant": "replan"}, {"nested": {"b": 1, "a": [2**70, 1.5]}}, None]
)
def test_the_cached_hashes_are_the_documented_formula(run_policy):
    """The hot path keeps its hashes by their inputs: each equals the sha256 of the canonical
    JSON of its form, computed afresh (an integer past 64 bits is hashed, not cached)."""
    from warrant.runner.canonical import canonical_json, sha256_hex
    from warrant.runner.policy_version import grants_form, settings_form

    tool = _tool()
    grants = (
        *BASE["grants"],
        dataclasses.replace(
            grant("memory:write", "bob/*", grant_id=3),
            destinations_from=("obs-2", "obs-1"),
            expires_at=time.time() + 60,
        ),
    )
    for _ in range(2):  # computed, then from the cache
        got = policy_version(tool=tool, grants=grants, run_policy=run_policy)
        granted = sha256_hex(canonical_json(grants_form(grants, tool.capabilities)))
        settings = sha256_hex(
            canonical_json(
                settings_form(relaxed=False, approvals_floor=None, run_policy=run_policy)
            )
        )
        whole = {"contract": contract_hash(tool), "grants": granted, "settings": settings}
        assert (got.grants, got.settings) == (granted, settings)
        assert got.version == sha256_hex(canonical_json(whole))
