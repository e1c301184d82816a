"""An example of ``warrant.testing`` (docs/testing-tools.md shows this file): the tests a
plug-in author writes for the example plug-in's tools (examples/weather_plugin), in process,
with no broker, database or worker. The weather service is faked with ``httpx.MockTransport``
under the plug-in's real client, so the HTTP mapping (4xx, 5xx, no answer) is tested too."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from warrant_weather import WeatherClient
from warrant_weather.tools import GET_WEATHER, SEND_MESSAGE

from warrant.testing import ToolHarness

OSLO = {"city": "Oslo", "conditions": "snow", "temperature_c": -3, "wind_kph": 12}


class FakeService:
    """The weather and message service, in memory: one message per idempotency key."""

    def __init__(self, *, fail: int | None = None, silent: bool = False, forget: bool = False):
        self.messages: dict[str, dict[str, Any]] = {}
        self.fail, self.silent, self.forget = fail, silent, forget

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.fail:
            return httpx.Response(self.fail, json={"error": "no"})
        if request.url.path == "/weather":
            return httpx.Response(200, json={**OSLO, "precipitation_mm": 1.5})
        key = request.headers.get("Idempotency-Key") or request.url.params.get("key", "")
        if request.method == "POST":
            if self.silent:
                raise httpx.ReadTimeout("no answer", request=request)
            sent = {"message_id": f"m-{len(self.messages) + 1}", **json.loads(request.content)}
            duplicate = key in self.messages
            self.messages.setdefault(key, sent)
            return httpx.Response(200, json={**self.messages[key], "duplicate": duplicate})
        found = [self.messages[key]] if key in self.messages and not self.forget else []
        return httpx.Response(200, json={"messages": found})


def harness(tool: Any, service: FakeService) -> ToolHarness:
    client = WeatherClient("http://weather.test", transport=httpx.MockTransport(service))
    return ToolHarness(tool, deps=client, subject="alice")


READ = [{"capability": "weather:read"}]
SEND = [{"capability": "messages:send", "resource_scope": "bob"}]
MESSAGE = {"to": "bob", "text": "snow in Oslo"}


def test_the_gate_wants_a_grant_and_keeps_it_to_its_scope():
    weather = harness(GET_WEATHER, FakeService())
    refused = weather.propose({"city": "Oslo"})
    assert (refused.decision, refused.code) == ("refused", "MISSING_CAPABILITY")
    assert weather.propose({"city": "Oslo"}, grants=READ).decision == "accepted"
    only_oslo = [{"capability": "weather:read", "resource_scope": "oslo"}]
    paris = weather.propose({"city": "Paris"}, grants=only_oslo)
    assert (paris.decision, paris.code) == ("refused", "RESOURCE_OUT_OF_SCOPE")
    invalid = weather.propose({"city": "Oslo; drop"}, grants=READ)
    assert (invalid.decision, invalid.code) == ("refused", "INVALID_CITY")


def test_a_forecast_is_read_and_typed():
    outcome = harness(GET_WEATHER, FakeService()).call({"city": "Oslo"})
    assert outcome.status == "succeeded"
    assert outcome.output == {**OSLO, "precipitation_mm": 1.5}


def test_a_message_waits_for_a_person_who_approves_that_exact_message():
    messages = harness(SEND_MESSAGE, FakeService())
    asked = messages.propose(MESSAGE, grants=SEND, goal="tell bob")
    assert asked.decision == "needs_confirmation" and asked.proposal_hash
    assert asked.request is not None and asked.request["tool"] == "send_message"
    approved = {"grants": SEND, "goal": "tell bob", "approved": [asked.proposal_hash]}
    assert messages.propose(MESSAGE, **approved).decision == "accepted"
    again = messages.propose({**MESSAGE, "text": "sunny in Oslo"}, **approved)
    assert again.decision == "needs_confirmation"  # the approval was for the other text


def test_a_message_is_sent_once_per_idempotency_token_and_its_postcondition_checked():
    service = FakeService()
    messages = harness(SEND_MESSAGE, service)
    first = messages.call(MESSAGE, token="t-1")
    retry = messages.call(MESSAGE, token="t-1")
    assert (first.status, first.output) == (
        "succeeded",
        {"message_id": "m-1", "to": "bob", "duplicate": False},
    )
    assert retry.output == {"message_id": "m-1", "to": "bob", "duplicate": True}
    assert list(service.messages) == ["t-1"]  # the retry stored nothing new
    # the service answered, but the message is not found afterwards: the run stops there
    lost = harness(SEND_MESSAGE, FakeService(forget=True)).call(MESSAGE)
    assert (lost.status, lost.code, lost.stop_reason) == (
        "succeeded",
        "TOOL_POSTCONDITION_FAILED",
        "TOOL_POSTCONDITION_FAILED",
    )
    assert lost.events[-1] == "tool.postcondition.checked"


@pytest.mark.parametrize(
    ("service", "status", "code", "retryable", "stop_reason"),
    [
        (FakeService(fail=503), "failed", "TOOL_FAILED", True, None),
        (FakeService(fail=404), "rejected", "TOOL_REJECTED", False, None),
        # sent, no answer: the message may be stored; only the reconciler can tell
        (FakeService(silent=True), "unknown", "TOOL_OUTCOME_UNKNOWN", False, "UNKNOWN_EFFECT"),
    ],
)
def test_the_services_answers_become_typed_outcomes(service, status, code, retryable, stop_reason):
    outcome = harness(SEND_MESSAGE, service).call(MESSAGE)
    assert (outcome.status, outcome.code, outcome.retryable, outcome.stop_reason) == (
        status,
        code,
        retryable,
        stop_reason,
    )
