"""Which pool and queues each worker role gets (issue 31): threads for the planner and the
tool role, prefork for tools that declare they need a process."""

from __future__ import annotations

import dataclasses

import pytest

from warrant.runner.errors import InvalidRequest
from warrant.runner.stack import roles
from warrant.tools import _builtin as builtin
from warrant.tools._contract import Isolation
from warrant.tools._registry import Registry

SEARCH = builtin.SEARCH_PUBLIC
CRUNCH = dataclasses.replace(SEARCH, name="crunch", isolation=Isolation.PROCESS)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    reg = Registry([SEARCH, CRUNCH])
    monkeypatch.setattr("warrant.runner.stack.roles.registry_for", lambda **_: reg)
    return reg


def test_pools():
    assert roles.role_pool("planner", 64) == "threads"
    assert roles.role_pool("tool", 32) == "threads"
    assert roles.role_pool("tool-process", 4) == "prefork"
    assert roles.role_pool("policy", 1) == "solo"
    assert roles.role_pool("policy", 2) == "prefork"


def test_the_tool_roles_split_the_tools_by_isolation(registry: Registry):
    assert roles.role_queues("tool") == ["tool.search_public"]
    assert roles.role_queues("tool-process") == ["tool.crunch"]
    assert roles.roles_needed() == list(roles.ROLES)


def test_a_tool_named_on_the_wrong_role_is_refused(registry: Registry):
    with pytest.raises(InvalidRequest) as info:
        roles.role_queues("tool", tools=["crunch"])
    assert info.value.code == "TOOL_ROLE_MISMATCH"
    with pytest.raises(InvalidRequest) as info:
        roles.role_queues("tool-process", tools=["search_public"])
    assert info.value.code == "TOOL_ROLE_MISMATCH"


def test_tool_process_is_started_only_when_a_tool_needs_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("warrant.runner.stack.roles.registry_for", lambda **_: Registry([SEARCH]))
    assert "tool-process" not in roles.roles_needed()
    assert "tool" in roles.roles_needed()


def test_thread_counts_come_from_the_settings(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WARRANT_TOOL_CONCURRENCY", "8")
    assert roles.role_concurrency("tool", None) == 8
    assert roles.role_concurrency("tool", 3) == 3
    assert roles.role_concurrency("tool-process", None) == 1
    command = roles.worker_command("tool")
    assert command[command.index("-c") + 1] == "8"
    assert command[command.index("-P") + 1] == "threads"


def test_a_heartbeat_timeout_shorter_than_four_beats_is_refused(monkeypatch):
    from pydantic import ValidationError

    from warrant.runner.settings import WarrantSettings

    monkeypatch.setenv("WARRANT_LEASE_HEARTBEAT_S", "2")
    monkeypatch.setenv("WARRANT_LEASE_HEARTBEAT_TIMEOUT_S", "5")
    with pytest.raises(ValidationError):
        WarrantSettings()
