"""``warrant run fork``: a new live run from a source run's record before a step, over the real
pipeline (Redis broker, Celery workers, PostgreSQL) and the demo service, whose drafts table
counts every effect (one row per idempotency token)."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_cli import warrant
from tests.integration.test_tool_execution import draft
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, GrantRow, Proposal, Run
from warrant.runner.client.ledger_verify import verify
from warrant.runner.client.remote import RemoteClient
from warrant.runner.errors import InvalidRequest, RunNotFound, SpecError

pytestmark = [pytest.mark.services, pytest.mark.slow]

DRAFTS = {"capability": "drafts:write"}


def _ids() -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"fork-{tag}-{n}" for n in (1, 2, 3)]


def _source_spec(ids: list[str]) -> dict:
    """Steps 1 to 3 each save a draft (a write the service counts), step 4 answers."""
    outputs = [draft(i, pid=f"p{n}") for n, i in enumerate(ids, start=1)]
    final = sc.final("saved", "tool-1", "tool-2", "tool-3")
    return sc.spec([*outputs, final], grants=[DRAFTS], max_refused_finals=1)


@pytest.fixture
def source(client, demo, draft_worker):
    """A finished run whose three draft saves were accepted and executed, and its ids."""
    ids = _ids()
    info = client.wait(client.start_run(_source_spec(ids)), timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert [demo.draft_count(draft_id=i) for i in ids] == [1, 1, 1]
    return info.run_id, ids


def _proposal(engine, run_id: str, step: int) -> Proposal:
    with session_scope(engine) as s:
        return s.scalars(
            select(Proposal).where(Proposal.run_id == run_id, Proposal.step == step)
        ).one()


def _carried(client, source_id: str, fork_id: str, at: int) -> None:
    """The fork's observations before ``at`` are the source's (ids, kinds, sources, contents)."""

    def shown(run_id: str) -> list[tuple]:
        return [
            (o["observation_id"], o["kind"], o["source"], o["step"], o["content"])
            for o in client.observations(run_id)
            if o["step"] < at
        ]

    assert shown(fork_id) == shown(source_id)
    assert [o[0] for o in shown(fork_id)][:1] == ["user-1"]


def test_a_fork_with_a_narrowed_grant_refuses_the_step_it_forked_at_and_repeats_no_earlier_effect(
    client, engine, demo, source
):
    source_id, ids = source
    narrowed = {"grants": [{"capability": "drafts:write", "resource_scope": f"draft:{ids[0]}"}]}
    fork_id = client.fork_run(source_id, at=3, spec_patch=narrowed)
    info = client.wait(fork_id, timeout=60)
    assert info.status not in ("running", "cancelling"), info
    assert (info.kind, info.source_run_id, info.source_step) == ("fork", source_id, 3)
    refused = _proposal(engine, fork_id, 3)
    assert (refused.tool, refused.status, refused.rejection_code) == (
        "save_draft",
        "rejected",
        "RESOURCE_OUT_OF_SCOPE",
    )
    with session_scope(engine) as s:  # steps 1 and 2 carried, not done again; step 3 refused
        commands = s.scalars(select(Command.step).where(Command.run_id == fork_id)).all()
        grant = s.scalars(select(GrantRow).where(GrantRow.run_id == fork_id)).one()
    assert sorted(commands) == [1, 2]
    assert (grant.resource_scope, grant.uses) == (f"draft:{ids[0]}", 2)
    assert [demo.draft_count(draft_id=i) for i in ids] == [1, 1, 1]
    _carried(client, source_id, fork_id, 3)


def test_a_fork_at_step_2_with_a_narrower_grant_goes_on_live_and_its_step_3_is_refused(
    client, engine, demo, source
):
    # the case: the grant narrowed to two uses; the source's step 1 used one
    source_id, ids = source
    narrower = {"grants": [{"capability": "drafts:write", "max_uses": 2}]}
    fork_id = client.fork_run(source_id, at=2, spec_patch=narrower)
    info = client.wait(fork_id, timeout=60)
    assert info.status not in ("running", "cancelling"), info
    live = _proposal(engine, fork_id, 2)
    assert (live.tool, live.status) == ("save_draft", "accepted")
    refused = _proposal(engine, fork_id, 3)
    assert (refused.tool, refused.status, refused.rejection_code) == (
        "save_draft",
        "rejected",
        "GRANT_EXHAUSTED",
    )
    # step 1 carried, never done again; step 2 done live once more (the fork's own token)
    assert [demo.draft_count(draft_id=i) for i in ids] == [1, 2, 1]
    _carried(client, source_id, fork_id, 2)
    # replayed (issue 55): only the fork's own steps, with the grant's carried use counted
    replayed = client.replay_run(fork_id)
    assert [(s["step"], s["now"]["code"], s["change"]) for s in replayed["steps"]] == [
        (2, None, None),
        (3, "GRANT_EXHAUSTED", None),
    ]


def test_a_fork_without_a_patch_does_its_step_live_once_and_carries_budgets_and_grant_uses(
    client, engine, demo, source
):
    source_id, ids = source
    fork_id = client.fork_run(source_id, at=3)
    # as created (its run.created names what it carried; the worker may have moved it since)
    created = facts.events(engine, fork_id, "run.created")[0].details
    assert (created["kind"], created["source_run_id"], created["source_step"]) == (
        "fork",
        source_id,
        3,
    )
    assert (created["model_calls"], created["tool_calls"]) == (2, 2)
    assert created["tool_calls_by_tool"] == {"save_draft": 2}
    assert sum(created["grant_uses"].values()) == 2
    with session_scope(engine) as s:
        run = s.get(Run, fork_id)
        assert (run.kind, run.source_run_id, run.source_step) == ("fork", source_id, 3)
        assert s.scalars(select(GrantRow.uses).where(GrantRow.run_id == fork_id)).one() >= 2
    info = client.wait(fork_id, timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert (info.step, info.model_calls, info.tool_calls) == (4, 4, 3)
    assert _proposal(engine, fork_id, 3).status != "rejected"
    # the service saw step 3 once more (the fork's own token), steps 1 and 2 never again
    assert [demo.draft_count(draft_id=i) for i in ids] == [1, 1, 2]
    _carried(client, source_id, fork_id, 3)
    assert verify(engine, fork_id)["intact"]  # the copied rows are on the fork's chain


def test_run_fork_json_prints_the_new_run_and_run_show_names_its_source(client, demo, source):
    source_id, ids = source
    out = warrant("run", "fork", source_id, "--at", "4", "--json")
    assert out.returncode == 0, out.stderr
    forked = json.loads(out.stdout)
    assert (forked["kind"], forked["source_run_id"], forked["source_step"]) == (
        "fork",
        source_id,
        4,
    )
    assert forked["run_id"] != source_id and forked["step"] >= 3  # created at 3, may be on
    info = client.wait(forked["run_id"], timeout=60)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    shown = json.loads(warrant("run", "show", forked["run_id"], "--json").stdout)
    assert (shown["kind"], shown["source_run_id"], shown["source_step"]) == ("fork", source_id, 4)
    listed = json.loads(warrant("run", "list", "--limit", "5", "--json").stdout)
    mine = next(r for r in listed if r["run_id"] == forked["run_id"])
    assert (mine["kind"], mine["source_run_id"], mine["source_step"]) == ("fork", source_id, 4)
    assert [demo.draft_count(draft_id=i) for i in ids] == [1, 1, 1]  # nothing done again


def test_run_fork_refuses_a_step_out_of_range_an_unknown_run_and_a_bad_patch_with_their_codes(
    client, source
):
    source_id, _ = source
    for at in (0, 6):
        with pytest.raises(InvalidRequest) as caught:
            client.fork_run(source_id, at=at)
        assert caught.value.code == "FORK_STEP_INVALID"
    with pytest.raises(RunNotFound):
        client.fork_run(str(uuid.uuid4()), at=1)
    with pytest.raises(SpecError):  # the merged spec is validated as a start's
        client.fork_run(source_id, at=2, spec_patch={"budgets": {"max_steps": -1}})
    out = warrant("run", "fork", source_id, "--at", "9", "--json")
    assert out.returncode != 0
    assert json.loads(out.stdout)["error"]["code"] == "FORK_STEP_INVALID"
    with session_scope(client.engine) as s:
        assert s.scalars(select(Run.id).where(Run.source_run_id == source_id)).all() == []


def test_post_fork_over_http_returns_the_new_run_or_the_step_code(
    client, source, live_api, producer_token
):
    source_id, _ = source
    with RemoteClient(live_api, producer_token) as remote:
        patch = {
            "goal": "Say what was saved.",
            "planner": {"outputs": [{"kind": "clarify", "question": "Which drafts?"}]},
        }
        fork_id = remote.fork_run(source_id, at=1, spec_patch=patch)
        info = remote.get_run(fork_id)
        assert (info.kind, info.source_run_id, info.source_step) == ("fork", source_id, 1)
        assert info.step <= 1  # created at step 0; its worker may have planned step 1 already
        assert info.goal == "Say what was saved."
        with pytest.raises(InvalidRequest) as caught:
            remote.fork_run(source_id, at=7)
        assert caught.value.code == "FORK_STEP_INVALID"
    ended = client.wait(fork_id, timeout=60)
    assert ended.status == "needs_input", ended  # the patched planner asked; nothing executed
    assert client.observations(fork_id)[0]["content"] == {"goal": "Say what was saved."}


def test_a_pre_approval_the_source_spent_is_spent_in_its_fork(engine, client, demo, draft_worker):
    from tests.integration.test_reconciler import NOTICES, notice, pre_approved
    from tests.integration.test_reconciler import spec as notice_spec

    to = f"{uuid.uuid4().hex[:8]}@example.com"
    source_spec = notice_spec([notice(to, "p1"), sc.final("Sent.", "tool-1")], grants=[NOTICES])
    source_spec["pre_approved"] = [pre_approved(notice(to))]
    source = client.wait(client.start_run(source_spec), timeout=30)
    assert source.status == "completed" and demo.notice_count(recipient=to) == 1
    # the fork's planner sends the same notice again at step 2: the spec's pre-approval of it
    # was spent at the source's step 1, so a person must confirm it this time
    again = [notice(to, "p1"), notice(to, "p2"), sc.final("Sent.", "tool-1")]
    fork_id = client.fork_run(source.run_id, at=2, spec_patch={"planner": {"outputs": again}})
    info = client.wait(fork_id, timeout=30, until={"waiting_confirmation", "failed", "completed"})
    assert info.status == "waiting_confirmation", info
    assert info.confirmation_request["tool"] == "send_notice"
    assert demo.notice_count(recipient=to) == 1
    [spent] = info.pre_approvals
    assert spent["used_by_proposal"] == "p1"
