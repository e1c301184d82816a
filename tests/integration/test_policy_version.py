"""Which policy decided (issue 36 item 4): every gate decision of a real run records its
policy version (``policy.versioned``), and ``warrant run show --json`` lists them per step."""

from __future__ import annotations

import json
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_cli import warrant
from warrant.runner.policy_version import contract_hash
from warrant.tools._builtin import BUILTIN_TOOLS

pytestmark = [pytest.mark.services, pytest.mark.slow]

SAVE = {
    "kind": "tool",
    "proposal_id": "p2",
    "tool": "save_preference",
    "tool_version": "1",
    "arguments": {"key": "answer_language", "value": "en"},
    "reason_summary": "",
    "source_observation_ids": [],
}


def _spec(scope: str = "public", on_missing_grant: str = "replan") -> dict[str, Any]:
    spec = sc.spec(
        [sc.search("p1"), SAVE, sc.final("Three.", "tool-1")],
        grants=[{"capability": "search:public", "resource_scope": scope}],
        max_refused_finals=1,
    )
    spec["policy"] = {"on_missing_grant": on_missing_grant}
    return spec


def _versions(engine: Any, run_id: str) -> list[dict[str, Any]]:
    return [dict(e.details, step=e.step) for e in facts.events(engine, run_id, "policy.versioned")]


def test_every_decision_records_its_policy_version_and_run_show_lists_them(
    engine, run_to_end, worker
):
    info = run_to_end(_spec())
    assert info.status == "completed", info
    versions = _versions(engine, info.run_id)
    assert [(v["step"], v["decision"]) for v in versions] == [(1, "accepted"), (2, "refused")]
    tools = {t.name: t for t in BUILTIN_TOOLS}
    assert versions[0]["contract_hash"] == contract_hash(tools["search_public"])
    assert versions[1]["contract_hash"] == contract_hash(tools["save_preference"])
    assert all(len(v["policy_version"]) == 64 for v in versions)

    shown = warrant("run", "show", info.run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)["policy_versions"]
    assert [(s["step"], s["proposal_id"], s["decision"]) for s in listed] == [
        (1, "p1", "accepted"),
        (2, "p2", "refused"),
    ]
    assert [s["policy_version"] for s in listed] == [v["policy_version"] for v in versions]

    # The same spec again: the same versions; another grant scope: the search's changes
    # (its grants), the save's does not (no grant of its capability either way).
    again = _versions(engine, run_to_end(_spec()).run_id)
    assert [v["policy_version"] for v in again] == [v["policy_version"] for v in versions]
    wider = _versions(engine, run_to_end(_spec(scope="*")).run_id)
    assert wider[0]["grants_hash"] != versions[0]["grants_hash"]
    assert wider[0]["policy_version"] != versions[0]["policy_version"]
    assert wider[1]["policy_version"] == versions[1]["policy_version"]
