"""Budgets a user can trust (issue 34, item 1), on real workers, Redis and PostgreSQL with the
fake OpenAI-compatible server: a cost cap the price table cannot enforce is refused at start,
a reply that reports no usage is charged by the documented estimate, every request carries
``max_tokens`` cut to what the budgets leave, and tools charge what they report."""

from __future__ import annotations

import json
import uuid

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_llm_planner import FINAL, SEARCH_CALL, llm_spec
from tests.paid_tool import CAPABILITY as PAID
from tests.paid_tool import proposal as paid
from warrant.runner import costs
from warrant.runner.errors import SpecError

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: ``priced-model`` in the test deployment's price table (``tests.conftest.MODEL_PRICES``).
PRICE = costs.Price(prompt_per_1k=0.5, completion_per_1k=1.0, known=True)


def _model() -> str:
    return f"unpriced-{uuid.uuid4().hex[:8]}"


def _prompt_tokens(body: dict) -> int:
    """The planner's estimate of a request's prompt, from the request as the server got it."""
    sent = {k: v for k, v in body.items() if k != "max_tokens"}
    return costs.estimated_tokens(sent)


def test_a_cost_cap_on_an_unpriced_model_is_refused_at_start(client, fake_openai):
    model = _model()
    with pytest.raises(SpecError) as refused:
        client.start_run(llm_spec(fake_openai, model, max_cost=1.0), publish=False)
    assert refused.value.code == "SPEC_INVALID"
    assert model in str(refused.value)
    assert refused.value.errors[0]["field"] == "planner.model"
    # said free: it starts; priced: it starts; no cap: it starts
    spec = llm_spec(fake_openai, model, max_cost=1.0, unpriced_calls_free=True)
    assert client.start_run(spec, publish=False)
    assert client.start_run(llm_spec(fake_openai, "priced-model", max_cost=1.0), publish=False)
    assert client.start_run(llm_spec(fake_openai, model), publish=False)


def test_a_reply_without_usage_is_charged_by_the_estimate(engine, client, worker, fake_openai):
    model = _model()
    fake_openai.script(model, [{"call": SEARCH_CALL, "usage": None}, {"call": FINAL}])
    info = client.wait(client.start_run(llm_spec(fake_openai, model)), timeout=30)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    first = fake_openai.requests_for(model)[0]["body"]
    estimated = facts.events(engine, info.run_id, "model.usage.estimated")
    assert len(estimated) == 1  # the second reply reported its usage (120 tokens)
    charged = estimated[0].details
    assert charged["prompt_tokens"] == _prompt_tokens(first)
    assert charged["completion_tokens"] > 0
    assert info.tokens_used == charged["prompt_tokens"] + charged["completion_tokens"] + 120
    received = facts.events(engine, info.run_id, "proposal.received")[0].details
    assert received["tokens"] == charged["prompt_tokens"] + charged["completion_tokens"]


def test_each_request_carries_max_tokens_cut_to_what_the_budgets_leave(client, worker, fake_openai):
    model = _model()
    fake_openai.script(model, [{"call": SEARCH_CALL}, {"call": FINAL}])
    info = client.wait(client.start_run(llm_spec(fake_openai, model, max_tokens=3000)), timeout=30)
    assert info.status == "completed", info
    first, second = (r["body"] for r in fake_openai.requests_for(model))
    assert first["max_tokens"] == min(4096, 3000 - _prompt_tokens(first))
    assert second["max_tokens"] == min(4096, 3000 - 120 - _prompt_tokens(second))
    # no budget: the planner's own per-call cap
    model = _model()
    fake_openai.script(model, [{"call": FINAL}])
    spec = llm_spec(fake_openai, model)
    spec["planner"]["max_completion_tokens"] = 300
    client.wait(client.start_run(spec), timeout=30)
    assert fake_openai.requests_for(model)[0]["body"]["max_tokens"] == 300
    # a cost cap: what the money left after the prompt buys at the completion price
    fake_openai.script("priced-model", [{"call": FINAL}])
    before = len(fake_openai.requests_for("priced-model"))
    client.wait(client.start_run(llm_spec(fake_openai, "priced-model", max_cost=2.0)), timeout=30)
    body = fake_openai.requests_for("priced-model")[before]["body"]
    money = 2.0 - PRICE.of(_prompt_tokens(body), 0)
    assert body["max_tokens"] == int(money / PRICE.completion_per_1k * 1000)


def test_a_budget_too_small_for_a_reply_stops_before_any_call(engine, client, worker, fake_openai):
    model = _model()
    fake_openai.script(model, [{"call": FINAL}])
    info = client.wait(client.start_run(llm_spec(fake_openai, model, max_tokens=200)), timeout=30)
    assert (info.status, info.stop_reason) == ("failed", "MAX_TOKENS_REACHED")
    assert fake_openai.requests_for(model) == []  # nothing was sent, nothing billed
    assert (info.model_calls, info.tokens_used) == (0, 0)
    failed = facts.events(engine, info.run_id, "model.failed")[0].details
    assert failed["code"] == "MAX_TOKENS_REACHED"


def test_tools_charge_what_they_report_to_the_same_budgets(engine, client, run_to_end):
    outputs = [paid(f"p{i}", tokens=40, cost=0.25) for i in range(1, 6)]
    spec = sc.spec(
        [*outputs, sc.final("done", "tool-1")],
        grants=[{"capability": PAID}],
        max_cost=0.6,
        max_tokens=10_000,
    )
    info = run_to_end(spec)
    # 0.25 + 0.25 = 0.5 < 0.6: a third call; 0.75 >= 0.6: the next planning step stops
    assert (info.status, info.stop_reason) == ("failed", "MAX_COST_REACHED")
    assert info.tool_calls == 3
    assert info.cost_used == pytest.approx(0.75)
    assert info.tokens_used == 120  # the fixture planner is charged nothing
    charged = facts.events(engine, info.run_id, "tool.usage.charged")
    assert [(e.details["tokens"], e.details["cost"]) for e in charged] == [(40, 0.25)] * 3
    assert {e.details["tool"] for e in charged} == {"paid_search"}


def test_a_refused_paid_call_is_charged_all_the_same(engine, client, run_to_end):
    spec = sc.spec(
        [paid("p1", tokens=7, cost=0.1, outcome="reject"), sc.final("done", "tool-1")],
        grants=[{"capability": PAID}],
    )
    info = run_to_end(spec)
    assert info.stop_reason == "FINAL_CITATION_VALIDATION_FAILED"  # the refusal is no evidence
    assert (info.tokens_used, info.cost_used) == (7, pytest.approx(0.1))
    outcome = facts.events(engine, info.run_id, "tool.completed")[0].details
    assert (outcome["status"], outcome["code"]) == ("rejected", "NOTHING_FOUND")
    shown = client.get_run(info.run_id).to_dict()
    assert json.loads(json.dumps(shown))["cost_used"] == pytest.approx(0.1)
