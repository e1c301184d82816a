"""Grants in wall-clock time, and operator grants that only narrow (issue 36 item 6), on real
PostgreSQL and workers.

- A grant whose ``expires_at`` passes mid-run refuses the next call ``GRANT_EXPIRED`` (and a
  refusal a grant wait does not cure).
- The verdict is the database clock's: a policy stage whose host clock runs 120 s ahead or
  behind (libfaketime) judges exactly as the database's time says.
- An operator's grant wider than a standing grant of its capability is refused
  ``GRANT_WIDENING_REFUSED`` unless widened explicitly, then traced ``grant.widened``;
  a narrower one is added freely. The CLI says the same with ``--json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select, text
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import wait_for
from tests.integration.test_cli import warrant
from tests.integration.test_external_proposals import external_spec
from tests.integration.test_grant_wait import _settled_after, asking, write
from tests.integration.test_tool_execution import LOOKUP, lookup
from warrant.ledger.models import GrantRow
from warrant.runner.errors import SpecError, StateConflict

pytestmark = [pytest.mark.services, pytest.mark.slow]


def db_now(engine) -> float:
    with engine.connect() as conn:
        return float(conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar())


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()


def lookup_until(expires_at: float) -> dict:
    return {**LOOKUP, "expires_at": iso(expires_at)}


def grants_of(engine, run_id: str) -> list[GrantRow]:
    with engine.connect() as conn:
        rows = conn.execute(select(GrantRow).where(GrantRow.run_id == run_id).order_by(GrantRow.id))
        return list(rows)


# --- expiry mid-run -----------------------------------------------------------------------------


def test_a_grant_whose_expiry_passes_mid_run_refuses_the_next_call(client, engine, worker):
    expires_at = db_now(engine) + 6
    spec = external_spec(grants=[lookup_until(expires_at)])
    spec["policy"] = {"on_missing_grant": "ask"}  # an expired grant is still not a wait
    run_id = client.start_run(spec)
    [row] = grants_of(engine, run_id)
    assert abs(row.expires_at.timestamp() - expires_at) < 0.001
    first = client.propose(run_id, lookup("order 1"), by="agent", wait_s=20)
    assert (first.state, first.outcome) == ("executed", "succeeded"), first
    wait_for(lambda: db_now(engine) >= expires_at, timeout=15, what="the database's clock passed")
    second = client.propose(run_id, lookup("order 2", pid="p2"), by="agent", wait_s=20)
    assert (second.state, second.code) == ("refused", "GRANT_EXPIRED"), second
    info = client.get_run(run_id)
    assert info.status == "running" and info.waiting_for_grant is None
    assert facts.commands(engine, run_id) == 1
    client.cancel(run_id, by="test")


def test_an_operator_grant_for_a_while_is_counted_on_the_database_clock(client, engine, worker):
    run_id = client.start_run(external_spec(grants=[]))
    before = db_now(engine)
    grant_id = client.add_grant(
        run_id, capability="lookup:read", expires_in_s=3600, granted_by="ops"
    )
    [row] = grants_of(engine, run_id)
    assert row.id == grant_id
    assert before + 3600 <= row.expires_at.timestamp() <= db_now(engine) + 3600
    [added] = facts.events(engine, run_id, "grant.added")
    assert added.details["expires_at"] == pytest.approx(row.expires_at.timestamp())
    with pytest.raises(SpecError):  # both an instant and a duration
        client.add_grant(
            run_id,
            capability="lookup:read",
            expires_in_s=60,
            expires_at=datetime.now(UTC),
            granted_by="ops",
        )
    client.cancel(run_id, by="test")


# --- a policy stage on a host whose clock is skewed --------------------------------------------

_PROBE = """
import json, sys, time
from warrant.broker.context import context_for
from warrant.broker.publish import RecordingPublisher
from warrant.broker.policy.stage import policy_evaluate
from warrant.ledger.db import engine_for
ctx = context_for(engine_for(sys.argv[1]), publisher=RecordingPublisher())
verdict = policy_evaluate(ctx, sys.argv[2], int(sys.argv[3]))
print(json.dumps({"host": time.time(), "verdict": verdict}))
"""


def _policy_on_a_skewed_host(services, run_id: str, version: int, skew: str) -> dict:
    libs = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not libs:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    env = {**os.environ, "LD_PRELOAD": str(libs[0]), "FAKETIME": skew, "FAKETIME_DONT_RESET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, services.database_url, run_id, str(version)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("skew", "expires_in", "verdict"),
    [
        ("+120s", 60.0, "accepted"),  # the host thinks it expired a minute ago: it has not
        ("-120s", -60.0, "rejected:GRANT_EXPIRED"),  # the host thinks it is live: it is not
    ],
)
def test_a_skewed_host_clock_does_not_change_the_verdict(
    services, engine, worker, skew, expires_in, verdict
):
    from warrant.broker.publish import RecordingPublisher
    from warrant.runner.client.api import Client

    recording = RecordingPublisher()
    client = Client(engine=engine, publisher=recording)  # no worker sees the policy message
    expires_at = db_now(engine) + expires_in
    run_id = client.start_run(external_spec(grants=[lookup_until(expires_at)]))
    pending = client.propose(run_id, lookup("order 9"), by="agent")
    assert pending.state == "pending"
    [(_, sent)] = [m for m in recording.sent if m[0] == "policy" and m[1]["run_id"] == run_id]
    probe = _policy_on_a_skewed_host(services, run_id, sent["version"], skew)
    host_says_expired = probe["host"] >= expires_at
    assert host_says_expired is (verdict == "accepted"), "the skew did not flip the host's view"
    assert probe["verdict"] == verdict
    client.cancel(run_id, by="test", revoke=False)


# --- narrowing is free, widening is explicit and traced ----------------------------------------

STANDING = {"capability": "artifact:write", "resource_scope": "run-output/reports/*", "max_uses": 3}


def test_a_narrower_grant_is_free_and_a_wider_one_needs_widen(client, engine, worker):
    run_id = client.start_run(sc.spec([sc.final("x")], grants=[STANDING]), publish=False)
    narrower = client.add_grant(
        run_id,
        capability="artifact:write",
        resource_scope="run-output/reports/q3*",
        max_uses=1,
        expires_in_s=60,
        granted_by="ops",
    )
    assert narrower > 0 and not facts.events(engine, run_id, "grant.widened")
    for wider in (
        {"resource_scope": "run-output/*", "max_uses": 1},
        {"resource_scope": "run-output/reports/*", "max_uses": 4},
        {"resource_scope": "run-output/reports/*"},  # unlimited uses
    ):
        with pytest.raises(StateConflict) as refused:
            client.add_grant(run_id, capability="artifact:write", granted_by="ops", **wider)
        assert refused.value.code == "GRANT_WIDENING_REFUSED", wider
    assert len(grants_of(engine, run_id)) == 2  # the refused ones were not added
    widened = client.add_grant(
        run_id,
        capability="artifact:write",
        resource_scope="run-output/*",
        max_uses=1,
        granted_by="ops",
        widen=True,
    )
    [event] = facts.events(engine, run_id, "grant.widened")
    assert event.details == {
        "grant_id": widened,
        "capability": "artifact:write",
        "by": "ops",
        "wider_on": ["resource_scope"],
        "before": {
            "resource_scope": "run-output/reports/*",
            "expires_at": None,
            "expires_at_step": None,
            "uses_left": 3,
            "destinations_from": None,
        },
        "after": {
            "resource_scope": "run-output/*",
            "expires_at": None,
            "expires_at_step": None,
            "uses_left": 1,
            "destinations_from": None,
        },
    }
    # a grant within the widened one is free again
    client.add_grant(
        run_id,
        capability="artifact:write",
        resource_scope="run-output/a.md",
        max_uses=1,
        granted_by="ops",
    )
    assert len(facts.events(engine, run_id, "grant.widened")) == 1
    client.cancel(run_id, by="test")


def test_a_waiting_run_is_widened_only_explicitly_then_runs_its_proposal(client, engine, worker):
    spec = asking([write(), sc.final("written", "tool-1")])
    spec["grants"] = [{"capability": "artifact:write", "resource_scope": "run-output/reports/*"}]
    run_id = client.start_run(spec)
    info = client.wait(run_id, timeout=30)
    assert info.status == "waiting_grant"
    assert info.waiting_for_grant["code"] == "RESOURCE_OUT_OF_SCOPE"
    with pytest.raises(StateConflict) as refused:
        client.add_grant(
            run_id, capability="artifact:write", resource_scope="run-output/*", granted_by="ops"
        )
    assert refused.value.code == "GRANT_WIDENING_REFUSED"
    assert client.get_run(run_id).status == "waiting_grant"
    client.add_grant(
        run_id,
        capability="artifact:write",
        resource_scope="run-output/*",
        granted_by="ops",
        widen=True,
    )
    info = _settled_after(client, run_id, info.version)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    names = [e.event for e in facts.events(engine, run_id) if e.event.startswith("grant.")]
    assert names == ["grant.requested", "grant.widened", "grant.added"]


def test_cli_grant_for_a_while_and_widen_with_json(client, engine, worker):
    run_id = client.start_run(sc.spec([sc.final("x")], grants=[STANDING]), publish=False)
    base = ("run", "grant", run_id, "--capability", "artifact:write", "--by", "ops", "--json")
    out = warrant(*base, "--scope", "run-output/reports/a.md", "--max-uses", "1", "--for", "1h30m")
    assert out.returncode == 0, out.stderr
    grant_id = json.loads(out.stdout)["grant_id"]
    [row] = [g for g in grants_of(engine, run_id) if g.id == grant_id]
    assert abs(row.expires_at.timestamp() - (db_now(engine) + 5400)) < 30
    refused = warrant(*base, "--scope", "run-output/*")
    assert refused.returncode != 0
    assert json.loads(refused.stdout)["error"]["code"] == "GRANT_WIDENING_REFUSED"
    bad = warrant(*base, "--for", "soon")
    assert json.loads(bad.stdout)["error"]["code"] == "DURATION_INVALID"
    widened = warrant(*base, "--scope", "run-output/*", "--widen")
    assert widened.returncode == 0, widened.stderr
    [event] = facts.events(engine, run_id, "grant.widened")
    assert event.details["grant_id"] == json.loads(widened.stdout)["grant_id"]
    client.cancel(run_id, by="test")
