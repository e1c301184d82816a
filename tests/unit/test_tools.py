"""Tool contracts and registry (pure)."""

from __future__ import annotations

import pytest

from warrant.tools._builtin import BUILTIN_TOOLS
from warrant.tools._plugins import registry_for
from warrant.tools._registry import Registry


def test_every_tool_field_is_documented_in_its_schema():
    for tool in registry_for():
        described = tool.describe()
        for schema in (described["inputSchema"], described["outputSchema"]):
            for name, prop in schema["properties"].items():
                assert prop.get("description"), f"{tool.name}.{name} has no docstring"


def test_a_tool_version_is_declared_once():
    with pytest.raises(ValueError, match="declared twice"):
        Registry([*BUILTIN_TOOLS, BUILTIN_TOOLS[0]])


def test_queues_follow_tool_names():
    registry = registry_for()
    assert registry.queues() == sorted(f"tool.{name}" for name in registry.names())
    assert {"tool.search_public", "tool.issue_refund", "tool.save_draft"} <= set(registry.queues())


def test_router_sends_commands_to_their_tool_queue():
    from warrant.broker.queues import TASK_PLANNER, TASK_TOOL, route_task

    assert (
        route_task(TASK_TOOL, (), {"tool": "write_artifact"}, {})["queue"] == "tool.write_artifact"
    )
    assert route_task(TASK_PLANNER, (), {}, {})["queue"] == "planner"
    with pytest.raises(ValueError):
        route_task(TASK_TOOL, (), {}, {})


# --- what a tool says with a refusal or failure ---------------------------------------------


def _tool_with_secrets():
    from tests.refusing_tool import TOOL

    return TOOL


def test_an_outcome_message_masks_secret_and_sensitive_values():
    said = _tool_with_secrets().outcome_message(
        "password 'hunter2x' wrong; note 'call me' \x00\x1b[2J\ud800; ok\n\tdone",
        {"account": "a", "password": "hunter2x", "note": "call me"},
    )
    assert said == "password '<secret>' wrong; note '<sensitive>' \ufffd\ufffd[2J\ufffd; ok\n\tdone"


def test_an_outcome_message_is_bounded_and_no_cut_leaves_half_a_secret():
    from warrant.tools._contract import MAX_OUTCOME_MESSAGE_CHARS as LIMIT

    tool = _tool_with_secrets()
    secret = "s3cr3t-" * 60  # replaced by a shorter mark: what follows moves towards the cut
    huge = tool.outcome_message(f"{secret} " * 50_000, {"password": secret})
    total = (len(secret) + 1) * 50_000
    assert len(huge) <= LIMIT + 60 and huge.endswith(f"[cut; {total} characters in all]")
    assert "s3cr3t" not in huge and huge.startswith("<secret> <secret>")
    for cut_at in range(LIMIT - 30, LIMIT + 30):
        said = tool.outcome_message("x" * cut_at + secret, {"password": secret})
        assert "s3cr" not in said and len(said) <= LIMIT + 60
    assert tool.outcome_message("short", {"password": secret}) == "short"


def test_the_planner_view_shows_a_refusal_message():
    from warrant.runner.memory_view import ObservationRecord, build_view

    said = "account acct-7 is locked until 10:00"
    observations = [
        ObservationRecord(
            observation_id="user-1", kind="user", source="user", step=0, content={"goal": "g"}
        ),
        ObservationRecord(
            observation_id="tool-1",
            kind="tool-result",
            source="trusted-tool",
            step=1,
            content={"tool": "sign_in", "status": "rejected", "code": "LOCKED", "message": said},
        ),
    ]
    view = build_view(
        run_id="r", step=2, observations=observations, tools=[], budgets={}, preferences={}
    )
    (item,) = view.items
    assert said in item.content and "LOCKED" in item.content
