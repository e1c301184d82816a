"""Tool contracts and registry (pure)."""

from __future__ import annotations

import pytest

from warrant.tools.builtin import BUILTIN_TOOLS
from warrant.tools.plugins import registry_for
from warrant.tools.registry import Registry


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
