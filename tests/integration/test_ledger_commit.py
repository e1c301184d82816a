"""``ledger.repo.commit`` on real PostgreSQL: a state-machine change is committed once."""

from __future__ import annotations

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from warrant.ledger import rows
from warrant.ledger.db import session_scope
from warrant.ledger.repo import StaleVersion, commit, run_view
from warrant.runner import run_machine as machine
from warrant.runner.codes import RunStatus, StopReason
from warrant.runner.run_machine import Stop


def test_the_ledger_commits_a_change_once_raising_the_version_by_one(engine, client):
    """``ledger.repo.commit`` on real PostgreSQL: version + 1, the trace events written with
    the status; the same change again (a duplicate message) is stale and writes nothing."""
    run_id = client.start_run(sc.spec([sc.final("unused", "tool-1")]), publish=False)
    with session_scope(engine) as s:
        found = rows.run(s, run_id)
        assert found is not None
        view = run_view(found)
    ended = Stop(RunStatus.FAILED, StopReason.INTERNAL_ERROR, {"stage": "test"})
    change = machine.stop(view, ended, step=view.step)
    with session_scope(engine) as s:
        assert commit(s, change, step=view.step) == view.version + 1
    with pytest.raises(StaleVersion), session_scope(engine) as s:
        commit(s, change, step=view.step)
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason, info.version) == (
        "failed",
        "INTERNAL_ERROR",
        view.version + 1,
    )
    events = facts.events(engine, run_id)
    assert [e.event for e in events].count("run.stopped") == 1
    moved = [e.details for e in events if e.event == "state.transitioned"]
    assert moved[-1] == {
        "from": "running",
        "to": "failed",
        "from_version": view.version,
        "to_version": view.version + 1,
    }
    assert [d["to"] for d in moved].count("failed") == 1
