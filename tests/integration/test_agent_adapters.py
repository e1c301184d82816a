"""The framework adapters against the real libraries (pydantic-ai, the OpenAI Agents SDK), a
fake OpenAI-compatible model and real workers: what the model reads for a refusal, a
person's "no" and an unknown effect, and what warrant recorded."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests import facts
from tests.integration.test_tool_execution import DRAFTS, LOOKUP, uid

pytestmark = [pytest.mark.services, pytest.mark.slow]

NOTICES = {"capability": "notices:send"}


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


def external_run(client: Any, grants: list[dict[str, Any]]) -> str:
    run_id: str = client.start_run(
        {
            "goal": "Adapter test.",
            "subject": "adapter-user",
            "planner": {"kind": "external", "agent": "tests"},
            "grants": grants,
        }
    )
    return run_id


def tool_messages(fake_openai: Any, model: str) -> list[str]:
    last = fake_openai.requests_for(model)[-1]["body"]["messages"]
    return [str(m.get("content")) for m in last if m["role"] == "tool"]


def notice(recipient: str) -> tuple[str, dict[str, str]]:
    return ("send_notice", {"recipient": recipient, "body": "Hello."})


# --- pydantic-ai ----------------------------------------------------------------------------


def pydantic_agent(fake_openai: Any, model: str, toolset: Any) -> Any:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="x")
    return Agent(
        OpenAIChatModel(model, provider=provider),
        toolsets=[toolset],
        output_type=[str, DeferredToolRequests],
    )


def test_pydantic_ai_refusal_unknown_effect_and_a_persons_no(
    fake_openai, client, engine, demo, worker, draft_worker
):
    from pydantic_ai import DeferredToolRequests

    from warrant.contrib.pydantic_ai import WarrantToolset

    run_id = external_run(client, [LOOKUP, DRAFTS, NOTICES])
    toolset = WarrantToolset(
        client, run_id, by="pai", tools=["lookup", "save_draft", "send_notice"]
    )
    recipient, draft_id = f"{uuid.uuid4().hex[:8]}@example.com", uid("d")
    model = f"pai-{uuid.uuid4().hex[:6]}"
    demo.set_fault("save_draft", "timeout_after_commit")
    fake_openai.script(
        model,
        [
            {"call": notice(recipient)},
            {"call": ("save_draft", {"draft_id": draft_id, "content": "x"})},
            {"text": "Not sent."},
        ],
    )
    agent = pydantic_agent(fake_openai, model, toolset)

    async def go() -> Any:
        first = await agent.run("Save and send.")
        assert isinstance(first.output, DeferredToolRequests), first.output
        [call] = first.output.approvals
        meta = first.output.metadata[call.tool_call_id]
        assert meta["run_id"] == run_id and len(meta["proposal_hash"]) == 64
        # a person says no, in warrant (an approver's action, as the CLI's)
        client.decline(run_id, proposal_hash=meta["proposal_hash"], by="bob")
        results = await toolset.results(first.output, wait_s=30)
        return await agent.run(message_history=first.all_messages(), deferred_tool_results=results)

    done = asyncio.run(go())
    assert done.output == "Not sent."
    seen = " ".join(tool_messages(fake_openai, model))
    assert "CONFIRMATION_DECLINED" in seen and "UNKNOWN_EFFECT" in seen, seen
    assert demo.notice_count(recipient=recipient) == 0
    [declined] = facts.events(engine, run_id, "confirmation.declined")
    assert declined.details["by"] == "bob"
    assert client.decision(run_id, 1).code == "CONFIRMATION_DECLINED"
    assert client.decision(run_id, 2).outcome == "unknown"


def test_the_adapters_offer_what_the_grants_cover(client, worker):
    from warrant.contrib.openai_agents import WarrantTools
    from warrant.contrib.pydantic_ai import WarrantToolset

    run_id = external_run(client, [LOOKUP])
    for adapter in (WarrantToolset, WarrantTools):
        with pytest.raises(ValueError, match="grants no capability for: send_notice"):
            adapter(client, run_id, by="a", tools=["lookup", "send_notice"])
    assert {t.name for t in WarrantTools(client, run_id, by="a").tools} == {"lookup"}
    assert set(WarrantToolset(client, run_id, by="a").tools) == {"lookup"}


@pytest.mark.parametrize("adapter", ["pydantic-ai", "openai-agents"])
def test_an_adapter_with_a_producer_token_cannot_confirm_its_own_call(
    adapter,
    request,
    fake_openai,
    client,
    engine,
    demo,
    live_api,
    producer_token,
    worker,
    draft_worker,
):
    """The agent's process holds a producer token: its confirm is refused (403), the call
    still waits for a person, and nothing was sent."""
    from warrant.runner.client.remote import RemoteClient
    from warrant.runner.errors import Forbidden

    agent_client = RemoteClient(live_api, producer_token)
    request.addfinalizer(agent_client.close)
    run_id = agent_client.start_run(
        {
            "goal": "Adapter test.",
            "subject": "adapter-user",
            "planner": {"kind": "external", "agent": "tests"},
            "grants": [NOTICES],
        }
    )
    recipient = f"{uuid.uuid4().hex[:8]}@example.com"
    name, arguments = notice(recipient)
    if adapter == "pydantic-ai":
        from warrant.contrib.pydantic_ai import WarrantToolset

        calls = WarrantToolset(agent_client, run_id, by="agent").calls
    else:
        from warrant.contrib.openai_agents import WarrantTools

        calls = WarrantTools(agent_client, run_id, by="agent").calls
    d = calls.call(run_id, name, arguments, by="agent", call_id="c1")
    assert d.state == "awaiting_confirmation", d
    with pytest.raises(Forbidden):
        agent_client.confirm(run_id, proposal_hash=d.proposal_hash or "", by="alice")
    assert client.decision(run_id, d.step).state == "awaiting_confirmation"
    assert facts.events(engine, run_id, "confirmation.approved") == []
    assert demo.notice_count(recipient=recipient) == 0


# --- the OpenAI Agents SDK --------------------------------------------------------------------


def sdk_agent(fake_openai: Any, model: str, gate: Any) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    openai = AsyncOpenAI(base_url=fake_openai.base_url, api_key="x", max_retries=0)
    chat = OpenAIChatCompletionsModel(model=model, openai_client=openai)
    return Agent(name="t", instructions="Use the tools.", model=chat, tools=gate.tools)


def test_agents_sdk_refusal_unknown_effect_and_a_persons_no(
    fake_openai, client, engine, demo, worker, draft_worker
):
    from agents import Runner

    from warrant.contrib.openai_agents import WarrantTools

    run_id = external_run(client, [DRAFTS, NOTICES])
    gate = WarrantTools(client, run_id, by="sdk", tools=["save_draft", "send_notice"])
    recipient, draft_id = f"{uuid.uuid4().hex[:8]}@example.com", uid("d")
    model = f"sdk-{uuid.uuid4().hex[:6]}"
    demo.set_fault("save_draft", "timeout_after_commit")
    fake_openai.script(
        model,
        [
            {"call": notice(recipient)},
            {"call": ("save_draft", {"draft_id": draft_id, "content": "x"})},
            {"text": "Not sent."},
        ],
    )
    agent = sdk_agent(fake_openai, model, gate)

    async def go() -> Any:
        result = await Runner.run(agent, "Look up, save, send.")
        [item] = result.interruptions
        assert item.tool_name == "send_notice"
        state = result.to_state()
        d = await asyncio.to_thread(client.decision, run_id, 1)
        client.decline(run_id, proposal_hash=d.proposal_hash, by="bob")  # a person says no
        assert await gate.decided(state, item, wait_s=30)
        return await Runner.run(agent, state)

    done = asyncio.run(go())
    assert done.final_output == "Not sent."
    seen = " ".join(tool_messages(fake_openai, model))
    assert "UNKNOWN_EFFECT" in seen and "CONFIRMATION_DECLINED" in seen, seen
    assert demo.notice_count(recipient=recipient) == 0
    [declined] = facts.events(engine, run_id, "confirmation.declined")
    assert declined.details["by"] == "bob"
    outcomes = [client.decision(run_id, step).state for step in (1, 2)]
    assert outcomes == ["refused", "executed"]
