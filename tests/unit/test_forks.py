"""The fork's pure rules: which step may be forked, the merge patch, the grant uses carried."""

from __future__ import annotations

from warrant.runner.forks import counted_grants, fork_problem, merge_patch


def test_a_fork_starts_at_a_step_from_one_to_the_source_last_step_plus_one():
    assert fork_problem(source_kind="live", last_step=4, at=1) is None
    assert fork_problem(source_kind="fork", last_step=4, at=5) is None
    for at in (0, -1, 6):
        refusal = fork_problem(source_kind="live", last_step=4, at=at)
        assert refusal is not None and refusal.code == "FORK_STEP_INVALID"


def test_a_replay_is_no_fork_source_and_an_unsettled_effect_before_the_step_refuses_it():
    assert fork_problem(source_kind="replay", last_step=3, at=2).code == "FORK_SOURCE_INVALID"
    refusal = fork_problem(source_kind="live", last_step=3, at=4, unsettled=[3])
    assert refusal.code == "FORK_STEP_INVALID" and "step 3" in str(refusal)
    assert fork_problem(source_kind="live", last_step=3, at=3, unsettled=[3]) is None


def test_the_spec_patch_is_an_rfc_7386_merge_patch():
    spec = {"goal": "a", "budgets": {"max_steps": 5, "deadline_s": 60}, "grants": [{"x": 1}]}
    patch = {"budgets": {"max_steps": 3, "deadline_s": None}, "grants": [], "subject": "s"}
    assert merge_patch(spec, patch) == {
        "goal": "a",
        "budgets": {"max_steps": 3},
        "grants": [],
        "subject": "s",
    }
    assert spec["budgets"] == {"max_steps": 5, "deadline_s": 60}  # the source's is unchanged
    assert merge_patch(spec, {}) == spec


def test_each_fork_grant_counts_the_source_uses_of_its_capability():
    grants = [{"capability": "drafts:write", "resource_scope": "draft:a"}, {"capability": "x"}]
    assert [g["uses"] for g in counted_grants(grants, {"drafts:write": 2})] == [2, 0]
