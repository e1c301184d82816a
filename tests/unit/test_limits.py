"""Shared limits, the pure part: the table a deployment declares and what is refused at start
(``SettingsInvalid`` ``INVALID_LIMIT``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from warrant.runner.errors import SettingsInvalid
from warrant.runner.limits import (
    COMPLETION_ESTIMATE_TOKENS,
    INVALID_LIMIT,
    ModelLimit,
    ToolLimit,
    check_storage,
    estimate_tokens,
    limit_table,
    limits_url,
)
from warrant.runner.settings import WarrantSettings
from warrant.tools._builtin import BUILTIN_TOOLS, SEARCH_PUBLIC
from warrant.tools._registry import Registry

REGISTRY = Registry(BUILTIN_TOOLS)


def _settings(**values: Any) -> WarrantSettings:
    return WarrantSettings(broker_url="redis://127.0.0.1:6379/0", **values)


def test_nothing_declared_is_an_empty_table() -> None:
    assert limit_table(_settings(), REGISTRY).empty


def test_model_limits_by_endpoint_and_by_key_name() -> None:
    table = limit_table(
        _settings(
            model_limits={
                "http://127.0.0.1:8000/v1/": {"requests_per_minute": 500},
                "TEAM_A_KEY": {"tokens_per_minute": 200_000},
            }
        ),
        REGISTRY,
    )
    found = table.for_model(base_url="http://127.0.0.1:8000/v1", api_key_env="TEAM_A_KEY")
    assert found == [
        ("endpoint:http://127.0.0.1:8000/v1", ModelLimit(requests_per_minute=500)),
        ("key:TEAM_A_KEY", ModelLimit(tokens_per_minute=200_000)),
    ]
    assert table.for_model(base_url="http://other/v1", api_key_env=None) == []


def test_settings_replace_the_contract_field_by_field() -> None:
    capped = dataclasses.replace(SEARCH_PUBLIC, max_in_flight=3, max_calls_per_minute=100)
    stricter = dataclasses.replace(SEARCH_PUBLIC, version="2", max_in_flight=2)
    registry = Registry([capped, stricter, *BUILTIN_TOOLS[1:]])
    assert limit_table(_settings(), registry).for_tool("search_public") == ToolLimit(
        max_in_flight=2, max_calls_per_minute=100
    )
    table = limit_table(_settings(tool_limits={"search_public": {"max_in_flight": 5}}), registry)
    assert table.for_tool("search_public") == ToolLimit(max_in_flight=5, max_calls_per_minute=100)
    assert table.for_tool("write_artifact") is None


def test_the_environment_is_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARRANT_TOOL_LIMITS", json.dumps({"search_public": {"max_in_flight": 2}}))
    monkeypatch.setenv("WARRANT_LIMITS_WINDOW_S", "5")
    table = limit_table(WarrantSettings(), REGISTRY)
    assert table.for_tool("search_public") == ToolLimit(max_in_flight=2)
    assert table.window_s == 5


@pytest.mark.parametrize(
    ("models", "tools"),
    [
        ({"http://h/v1": {"requests_per_minute": 0}}, {}),
        ({"http://h/v1": {"requests_per_minute": -5}}, {}),
        ({"http://h/v1": {"requests_per_minute": 2.5}}, {}),
        ({"http://h/v1": {"requests_per_minute": "60"}}, {}),
        ({"http://h/v1": {"requests_per_minute": True}}, {}),
        ({"http://h/v1": {"requests_per_minute": 10**12}}, {}),
        ({"http://h/v1": {"requests_per_hour": 5}}, {}),
        ({"http://h/v1": {}}, {}),
        ({"http://h/v1": 60}, {}),
        ({"not a key": {"requests_per_minute": 5}}, {}),
        ({"ftp://h/v1": {"requests_per_minute": 5}}, {}),
        ({}, {"no_such_tool": {"max_in_flight": 2}}),
        ({}, {"search_public": {"max_in_flight": 0}}),
        ({}, {"search_public": {"max_in_flight": 1.0}}),
        ({}, {"search_public": {"max_concurrency": 2}}),
        ({}, {"search_public": None}),
    ],
)
def test_bad_values_are_refused_with_the_code(models: Any, tools: Any) -> None:
    with pytest.raises(SettingsInvalid) as caught:
        limit_table(_settings(model_limits=models, tool_limits=tools), REGISTRY)
    assert caught.value.code == INVALID_LIMIT


def test_a_bad_contract_value_is_refused_with_the_code() -> None:
    registry = Registry([dataclasses.replace(SEARCH_PUBLIC, max_in_flight=0)])
    with pytest.raises(SettingsInvalid) as caught:
        limit_table(_settings(), registry)
    assert caught.value.code == INVALID_LIMIT
    assert "search_public" in str(caught.value)


def test_limits_need_a_redis() -> None:
    settings = WarrantSettings(
        broker_url="amqp://guest@127.0.0.1//", tool_limits={"search_public": {"max_in_flight": 1}}
    )
    table = limit_table(settings, REGISTRY)
    assert limits_url(settings, settings.broker_url) is None
    with pytest.raises(SettingsInvalid) as caught:
        check_storage(table, limits_url(settings, settings.broker_url))
    assert caught.value.code == INVALID_LIMIT
    own = WarrantSettings(limits_url="redis://127.0.0.1:6379/3")
    assert limits_url(own, "amqp://guest@127.0.0.1//") == "redis://127.0.0.1:6379/3"
    assert limits_url(WarrantSettings(), "redis://h:6379/1") == "redis://h:6379/1"
    check_storage(limit_table(WarrantSettings(), REGISTRY), None)  # nothing declared: no Redis


def test_the_token_estimate_grows_with_the_prompt() -> None:
    small = estimate_tokens({"messages": [{"content": "x"}]})
    large = estimate_tokens({"messages": [{"content": "x" * 4000}]})
    assert small > COMPLETION_ESTIMATE_TOKENS
    assert large - small == 1000
