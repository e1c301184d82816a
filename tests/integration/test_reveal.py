"""Revealing a pending proposal's sensitive values to who may confirm it: ``warrant run show
--reveal`` on the database and over a real ``warrant serve`` subprocess, and
``GET /v1/runs/{id}?reveal=true``. Each reveal is a ``sensitive.revealed`` trace row (who, from
where, which fields; never the values); without it, and for a producer or a viewer, the values
stay ``<sensitive>``. Facts are read back from the ledger."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Any

import httpx
import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration import test_remote_cli as remote_cli
from tests.integration.test_cli import warrant
from tests.integration.test_gate_pipeline import memory_spec, save
from tests.integration.test_remote_cli import error_code, remote
from warrant.runner.cli.run_shown import local_user

pytestmark = [pytest.mark.services, pytest.mark.slow]

EVENT = "sensitive.revealed"

#: ``warrant serve`` as a subprocess on a free port (the fixture of test_remote_cli).
server = remote_cli.server


@pytest.fixture(scope="module")
def people(engine: Any) -> dict[str, str]:
    """A token per role, and ``label:<role>`` its recorded identity."""
    from warrant.runner.client.tokens import Tokens

    made: dict[str, str] = {}
    suffix = uuid.uuid4().hex[:6]
    for role in ("producer", "approver", "operator", "viewer"):
        token, _ = Tokens(engine).create(f"reveal-{role}-{suffix}", role, created_by="tests")
        made[role] = token
        made[f"label:{role}"] = f"reveal-{role}-{suffix} ({role})"
    return made


def waiting_run(client: Any) -> tuple[str, str]:
    """A run waiting for the confirmation of a ``save_preference`` whose ``value`` (a
    sensitive field) is unique to it; the run's id and that value."""
    value = f"v-{uuid.uuid4().hex[:12]}"
    subject = f"reveal-{uuid.uuid4().hex[:8]}"
    outputs = [sc.search("p1"), save(value), sc.final("Saved.", "tool-1", "tool-2")]
    run_id = client.start_run(memory_spec(outputs, subject))
    info = client.wait(run_id, timeout=60)
    assert info.status == "waiting_confirmation", info
    assert info.confirmation_request["parameters"]["value"] == "<sensitive>"
    return run_id, value


def reveals(engine: Any, run_id: str) -> list[dict[str, Any]]:
    return [dict(e.details) for e in facts.events(engine, run_id, EVENT)]


def get(url: str, token: str, run_id: str, **params: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "User-Agent": "reveal-test"}
    return httpx.get(f"{url}/v1/runs/{run_id}", params=params, headers=headers, timeout=60)


def test_run_show_reveals_only_when_asked_and_traces_who_looked(client, engine, worker):
    run_id, value = waiting_run(client)

    masked = warrant("run", "show", run_id, "--json")
    assert masked.returncode == 0, masked.stderr
    shown = json.loads(masked.stdout)
    assert "revealed" not in shown and value not in masked.stdout
    assert shown["confirmation_request"]["parameters"]["value"] == "<sensitive>"
    readable = warrant("run", "show", run_id)
    assert readable.returncode == 0 and value not in readable.stdout
    assert reveals(engine, run_id) == []

    out = warrant("run", "show", run_id[:8], "--reveal", "--by", "alice", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["confirmation_request"]["parameters"]["value"] == "<sensitive>"  # unchanged
    h = data["confirmation_request"]["proposal_hash"]
    shown = data["revealed"]
    arguments = shown.pop("arguments")
    assert shown == {
        "run_id": run_id,
        "proposal_hash": h,
        "tool": "save_preference",
        "tool_version": data["confirmation_request"]["tool_version"],
        "fields": ["value"],
    }
    assert (arguments["key"], arguments["value"]) == ("answer_language", value)
    [event] = reveals(engine, run_id)
    assert event == {
        "by": "alice",
        "via": "cli",
        "from": socket.gethostname(),
        "fields": ["value"],
        "proposal_hash": h,
    }
    assert value not in json.dumps(event)  # who looked is traced, never what they saw

    people = warrant("run", "show", run_id, "--reveal")  # who: the login name
    assert people.returncode == 0, people.stderr
    assert value in people.stdout and "revealed value (traced as sensitive.revealed)" in (
        people.stdout
    )
    assert [e["by"] for e in reveals(engine, run_id)] == ["alice", local_user()]
    assert client.get_run(run_id).status == "waiting_confirmation"  # a reveal changes nothing


def test_a_reveal_of_a_run_waiting_for_nothing_shows_and_traces_nothing(client, engine, worker):
    run_id = client.start_run(sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")]))
    assert client.wait(run_id, timeout=60).status == "completed"
    out = warrant("run", "show", run_id, "--reveal", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["revealed"] is None
    readable = warrant("run", "show", run_id, "--reveal")
    assert "nothing to reveal" in readable.stdout
    assert reveals(engine, run_id) == []


def test_the_api_reveals_to_a_role_that_may_confirm_and_refuses_the_others(
    server, people, client, engine, worker
):
    run_id, value = waiting_run(client)

    plain = get(server, people["approver"], run_id)
    assert plain.status_code == 200 and plain.json()["revealed"] is None
    assert value not in plain.text
    for role in ("producer", "viewer"):
        r = get(server, people[role], run_id, reveal="true")
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "REVEAL_FORBIDDEN" and value not in r.text
    assert reveals(engine, run_id) == []

    r = get(server, people["approver"], run_id, reveal="true")
    assert r.status_code == 200, r.text
    body = r.json()
    h = body["confirmation_request"]["proposal_hash"]
    assert body["confirmation_request"]["parameters"]["value"] == "<sensitive>"
    assert body["revealed"]["arguments"]["value"] == value
    assert (body["revealed"]["fields"], body["revealed"]["proposal_hash"]) == (["value"], h)
    r = get(server, people["operator"], run_id, reveal="true")
    assert r.status_code == 200 and r.json()["revealed"]["arguments"]["value"] == value
    assert reveals(engine, run_id) == [
        {
            "by": people[f"label:{role}"],
            "via": "api",
            "from": "127.0.0.1",
            "user_agent": "reveal-test",
            "fields": ["value"],
            "proposal_hash": h,
        }
        for role in ("approver", "operator")
    ]
    document = httpx.get(f"{server}/openapi.json", timeout=30).json()
    operation = document["paths"]["/v1/runs/{run_id}"]["get"]
    assert "reveal" in [p["name"] for p in operation["parameters"]]
    assert "REVEAL_FORBIDDEN" in operation["responses"]["403"]["description"]
    assert "RevealedOut" in json.dumps(document["components"]["schemas"]["RunOut"])


def test_run_show_reveal_over_a_remote_server(server, people, client, engine, worker, tmp_path):
    run_id, value = waiting_run(client)
    show = ("run", "show", run_id[:8], "--reveal", "--by", "not-me", "--json")

    denied = remote(server, people["producer"], *show, tmp=tmp_path)
    assert (denied.returncode, error_code(denied)) == (2, "REVEAL_FORBIDDEN")
    assert value not in denied.stdout
    masked = remote(server, people["approver"], *show[:3], "--json", tmp=tmp_path)
    assert masked.returncode == 0 and value not in masked.stdout
    assert "revealed" not in json.loads(masked.stdout)
    assert reveals(engine, run_id) == []

    out = remote(server, people["approver"], *show, tmp=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["revealed"]["arguments"]["value"] == value
    assert data["revealed"]["proposal_hash"] == data["confirmation_request"]["proposal_hash"]
    readable = remote(server, people["approver"], *show[:4], tmp=tmp_path)
    assert readable.returncode == 0 and value in readable.stdout
    events = reveals(engine, run_id)
    assert [(e["by"], e["via"], e["from"]) for e in events] == [
        (people["label:approver"], "api", "127.0.0.1")  # the token's identity, not --by
    ] * 2
    assert all(e["user_agent"].startswith("python-httpx/") for e in events)
