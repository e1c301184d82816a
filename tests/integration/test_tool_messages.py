"""What a tool says with its refusal or failure (``ToolRejected("…", code=…)``): recorded with
the outcome, shown to the planner, in ``run show``, ``run trace``, ``run view`` and the HTTP
API — bounded in length, with secret and sensitive argument values masked. Real worker,
Redis and PostgreSQL; a real CLI subprocess and uvicorn server."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from warrant_demo import scenarios as sc

from tests import facts, refusing_tool
from tests.integration.test_cli import warrant
from tests.integration.test_http_api import LiveServer
from warrant.ledger.db import session_scope
from warrant.ledger.models import Observation, OutcomeRow
from warrant.tools._contract import MAX_OUTCOME_MESSAGE_CHARS

pytestmark = [pytest.mark.services]

PASSWORD = "hunter2-" + uuid.uuid4().hex[:8]
NOTE = "ticket " + uuid.uuid4().hex[:8]
SAID = "account acct-7 refused password '<secret>' (note: <sensitive>)"
GRANT = {"capability": refusing_tool.CAPABILITY}


def _run(run_to_end: Any, **arguments: Any) -> Any:
    plan = [
        refusing_tool.proposal("p1", password=PASSWORD, note=NOTE, **arguments),
        {"kind": "clarify", "question": "which account?"},
    ]
    return run_to_end(sc.spec(plan, grants=[GRANT]))


def _outcome(engine: Any, run_id: str) -> OutcomeRow:
    with session_scope(engine) as s:
        return s.query(OutcomeRow).filter_by(run_id=run_id).one()


def _observation(engine: Any, run_id: str, observation_id: str) -> dict[str, Any]:
    with session_scope(engine) as s:
        row = s.query(Observation).filter_by(run_id=run_id, observation_id=observation_id).one()
        return dict(row.content)


def _no_secrets(text: str) -> None:
    assert PASSWORD not in text and NOTE not in text
    assert "\x00" not in text and "\x1b" not in text


def test_a_refusal_message_reaches_the_ledger_the_planner_and_the_trace(engine, run_to_end):
    info = _run(run_to_end)
    assert info.stop_reason == "CLARIFICATION_REQUIRED"  # the planner went on after the refusal
    outcome = _outcome(engine, info.run_id)
    assert (outcome.status, outcome.code) == ("rejected", "SIGN_IN_REFUSED")
    assert outcome.message is not None and outcome.message.startswith(SAID)
    _no_secrets(outcome.message)
    # the observation the planner is shown carries the tool's words
    content = _observation(engine, info.run_id, "tool-1")
    assert content["code"] == "SIGN_IN_REFUSED" and content["message"] == outcome.message
    (completed,) = facts.events(engine, info.run_id, "tool.completed")
    assert completed.details["message"] == outcome.message

    shown = warrant("run", "show", info.run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    refusal = json.loads(shown.stdout)["why"]["last_refusal"]
    assert (refusal["code"], refusal["event"]) == ("SIGN_IN_REFUSED", "tool.completed")
    assert refusal["message"] == outcome.message
    human = warrant("run", "show", info.run_id).stdout
    assert f"last refusal: SIGN_IN_REFUSED at step 1 (tool.completed): {SAID}" in human, human

    trace = warrant("run", "trace", info.run_id)
    assert trace.returncode == 0, trace.stderr
    assert SAID in " ".join(trace.stdout.split()), trace.stdout  # the table may wrap it
    view = json.loads(warrant("run", "view", info.run_id, "--json").stdout)
    (item,) = [i for i in view["items"] if i["item_id"] == "tool-1"]
    assert SAID in item["content"] and "SIGN_IN_REFUSED" in item["content"]
    for text in (shown.stdout, human, trace.stdout, json.dumps(view)):
        _no_secrets(text)


def test_a_megabyte_failure_message_is_bounded(engine, run_to_end):
    info = _run(run_to_end, outcome="fail", filler=2_000_000)
    assert info.stop_reason == "TOOL_FAILED"
    outcome = _outcome(engine, info.run_id)
    assert (outcome.status, outcome.code) == ("failed", "SIGN_IN_BROKEN")
    assert outcome.message is not None and outcome.message.startswith(SAID)
    assert len(outcome.message) <= MAX_OUTCOME_MESSAGE_CHARS + 60
    assert outcome.message.endswith("characters in all]")
    _no_secrets(outcome.message)
    (stopped,) = facts.events(engine, info.run_id, "run.stopped")
    assert stopped.details["detail"]["message"] == outcome.message


def test_the_http_api_shows_the_message(engine, client, run_to_end):
    from warrant.runner.client.tokens import Tokens
    from warrant.runner.server.http import create_app

    info = _run(run_to_end)
    token, _ = Tokens(engine).create(f"msg-{uuid.uuid4().hex[:6]}", "viewer", created_by="tests")
    headers = {"Authorization": f"Bearer {token}"}
    with LiveServer(create_app(client=client)) as server:
        trace = httpx.get(f"{server.url}/v1/runs/{info.run_id}/trace", headers=headers)
        view = httpx.get(f"{server.url}/v1/runs/{info.run_id}/view", headers=headers)
    assert trace.status_code == 200 and view.status_code == 200, (trace.text, view.text)
    completed = [e for e in trace.json()["events"] if e["event"] == "tool.completed"]
    assert completed[0]["details"]["message"].startswith(SAID)
    (item,) = [i for i in view.json()["items"] if i["item_id"] == "tool-1"]
    assert SAID in item["content"]
    _no_secrets(trace.text + view.text)
