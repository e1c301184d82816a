"""What stands before the gate refuses a proposal nested too deep (or holding NaN) with a code,
never a crash: the external-proposal entry (``PROPOSAL_TOO_DEEP``, ``PROPOSAL_INVALID``), the
HTTP API (the same codes; ``REQUEST_INVALID`` past its JSON parser's own limit), the MCP
gateway's calls (the same codes) and the model reply parser (``MODEL_OUTPUT_INVALID`` with
reason ``ARGUMENTS_TOO_DEEP``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.gate import gate
from tests.unit.test_gate_depth import DEPTHS, nested
from tests.unit.test_http_api import FakeClient, FakeTokens, Http
from tests.unit.test_model_retry import _propose, answered
from warrant.runner import policy
from warrant.runner.canonical import MAX_JSON_DEPTH, json_depth
from warrant.runner.client.external_calls import ExternalCalls
from warrant.runner.errors import InvalidRequest
from warrant.runner.external import Decision, check_shape
from warrant.runner.memory_view import MemoryItem, WorkingMemoryView
from warrant.runner.planners.openai_compatible import _Invalid, parse_reply
from warrant.runner.server.http import create_app
from warrant.runner.server.http.models import bad_text
from warrant.tools._plugins import registry_for

REGISTRY = registry_for()


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, *DEPTHS])
def test_an_external_proposal_too_deep_is_refused_before_it_is_recorded(depth):
    with pytest.raises(InvalidRequest) as err:
        check_shape({"kind": "tool", "arguments": {"a": nested(depth)}})
    assert err.value.code == "PROPOSAL_TOO_DEEP"
    check_shape({"kind": "tool", "arguments": {"a": nested(MAX_JSON_DEPTH - 3)}})


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_an_external_proposal_with_nan_or_infinity_is_invalid_not_a_crash(number):
    with pytest.raises(InvalidRequest) as err:
        check_shape({"kind": "tool", "arguments": {"a": number}})
    assert err.value.code == "PROPOSAL_INVALID"


class ProposingClient(FakeClient):
    def propose(self, run_id: str, raw: Any, **kw: Any) -> Decision:
        check_shape(raw)  # what Client.propose does first (submit_proposal)
        return Decision(run_id=run_id, step=1, state="refused", code="X")


@pytest.mark.parametrize(
    ("depth", "codes"),
    [
        (100, {"PROPOSAL_TOO_DEEP"}),
        (600, {"PROPOSAL_TOO_DEEP"}),  # was 500: RecursionError in bad_text
        # past json.loads' own limit (which depends on the stack in use and the recursion
        # limit): FastAPI's body parse refuses it, else the proposal's depth check
        *((depth, {"REQUEST_INVALID", "PROPOSAL_TOO_DEEP"}) for depth in DEPTHS),
    ],
)
def test_a_deep_body_is_a_4xx_in_the_error_shape_never_a_500(depth, codes):
    http = Http(create_app(client=ProposingClient(), tokens=FakeTokens()))
    inner = "[" * depth + "]" * depth
    body = '{"proposal": {"kind": "tool", "tool": "t", "arguments": {"a": ' + inner + "}}}"
    headers = {"Authorization": "Bearer operator", "Content-Type": "application/json"}
    r = http.post("/v1/runs/r-1/proposals", content=body.encode(), headers=headers)
    assert r.status_code == 422 and r.json()["error"]["code"] in codes


@pytest.mark.parametrize("body", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_a_body_with_nan_or_infinity_is_a_4xx(body):
    http = Http(create_app(client=ProposingClient(), tokens=FakeTokens()))
    raw = b'{"proposal": {"kind": "tool", "arguments": {"a": %s}}}' % body
    headers = {"Authorization": "Bearer operator", "Content-Type": "application/json"}
    r = http.post("/v1/runs/r-1/proposals", content=raw, headers=headers)
    assert (r.status_code, r.json()["error"]["code"]) == (422, "PROPOSAL_INVALID")


def test_bad_text_walks_any_depth():
    assert bad_text(nested(100_000, leaf="a\x00b")) == "NUL characters are not allowed"
    assert bad_text(nested(100_000, "object")) is None
    assert bad_text({"k\x00": 1}) == "NUL characters are not allowed"


def _reply(arguments: str) -> dict[str, Any]:
    call = {"function": {"name": "search_public", "arguments": arguments}}
    return {"choices": [{"message": {"tool_calls": [call]}}]}


def _view() -> WorkingMemoryView:
    goal = MemoryItem(item_id="user-1", kind="goal", source="user", content="g", created_at_step=0)
    tools = [{"name": "search_public", "version": "1", "description": "", "inputSchema": {}}]
    return WorkingMemoryView(
        run_id="r1", step=1, goal=goal, items=[], tools=tools, budgets={}, preferences={}
    )


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH - 1, *DEPTHS])
def test_model_arguments_too_deep_are_an_invalid_output_not_a_crash(depth):
    arguments = '{"query": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(_Invalid) as err:
        parse_reply(_reply(arguments), _view(), proposal_id="p1")
    assert (err.value.code, err.value.reason) == ("ARGUMENTS_TOO_DEEP", "ARGUMENTS_TOO_DEEP")
    shallow = '{"query": ' + "[" * 10 + "]" * 10 + "}"
    out = parse_reply(_reply(shallow), _view(), proposal_id="p1")
    assert json_depth(out) == 12 and policy.evaluate(gate(out)).code == "INVALID_QUERY"


@pytest.mark.parametrize(
    ("content", "invalid"),
    [
        (b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "BODY_NOT_JSON"),
        (json.dumps(_reply('{"query": ' + "[" * 5_000 + "]" * 5_000 + "}")), "ARGUMENTS_TOO_DEEP"),
    ],
)
def test_the_planner_replies_invalid_for_a_deep_reply(monkeypatch, content, invalid):
    """What the planner stage records as ``MODEL_OUTPUT_INVALID`` with this reason."""
    reply, posts = _propose(monkeypatch, answered(200, content=content))
    assert (reply.raw, reply.invalid, posts) == (None, invalid, 1)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [({"q": nested(5_000)}, "PROPOSAL_TOO_DEEP"), ({"q": float("nan")}, "PROPOSAL_INVALID")],
)
def test_the_mcp_gateways_calls_refuse_with_a_code_before_anything(arguments, code):
    """``ExternalCalls.call`` (the MCP gateway, the adapters) keyed its waiting calls by
    canonical JSON first: RecursionError, FloatDomainError; the gateway shows only codes."""
    calls = ExternalCalls(ProposingClient(), REGISTRY)
    with pytest.raises(InvalidRequest) as err:
        calls.call("r-1", "search_public", arguments, by="agent")
    assert err.value.code == code
