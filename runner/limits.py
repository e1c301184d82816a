"""Shared limits, the pure part: what is limited, by how much, and the checks at start.

Declared in two places:

* **model endpoints and keys**, in the settings only (``WARRANT_MODEL_LIMITS``, JSON): a
  key that contains ``://`` is an endpoint (a planner spec's ``base_url``, trailing ``/``
  ignored); any other key is the *name* of an API-key variable (a spec's ``api_key_env``):
  the provider's quota follows the key, whichever endpoint or run uses it. Each names
  ``requests_per_minute`` and/or ``tokens_per_minute``; a call is held to every entry that
  matches it. A run spec cannot declare or widen a limit.
* **tools**, on the contract (``Tool.max_in_flight``, ``Tool.max_calls_per_minute``; the
  strictest of a tool's versions: all versions share one limit, keyed by the tool's name) and
  per deployment in ``WARRANT_TOOL_LIMITS`` (``{"name": {"max_in_flight": 2}}``), which
  replaces the contract's value field by field.

Every value must be a positive integer (at most :data:`MAX_LIMIT`), every key known, every
tool named in the settings registered: anything else is refused at start with
``SettingsInvalid`` ``INVALID_LIMIT`` (``warrant worker``, and building the Celery app that
every worker and client process builds). A "minute" is ``WARRANT_LIMITS_WINDOW_S`` seconds
(60; tests shorten it). The Redis side, waiting and tracing, is :mod:`warrant.broker.limits`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from warrant.runner.errors import SettingsInvalid
from warrant.runner.settings import WarrantSettings
from warrant.tools._registry import Registry

__all__ = [
    "COMPLETION_ESTIMATE_TOKENS",
    "INVALID_LIMIT",
    "MAX_LIMIT",
    "LimitTable",
    "ModelLimit",
    "ModelLimiter",
    "ToolLimit",
    "estimate_tokens",
    "limit_table",
    "limits_url",
]

INVALID_LIMIT = "INVALID_LIMIT"
#: Largest value any limit may have (a bigger one is a typo, not a limit).
MAX_LIMIT = 1_000_000_000
#: Tokens a reply is assumed to use until its usage is known (the spec sets no ``max_tokens``).
COMPLETION_ESTIMATE_TOKENS = 512
MODEL_FIELDS = ("requests_per_minute", "tokens_per_minute")
TOOL_FIELDS = ("max_in_flight", "max_calls_per_minute")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")
_ENDPOINT = re.compile(r"^https?://[^\s/]+(/[^\s]*)?$")


@dataclass(frozen=True, kw_only=True)
class ModelLimit:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


@dataclass(frozen=True, kw_only=True)
class ToolLimit:
    max_in_flight: int | None = None
    max_calls_per_minute: int | None = None


@dataclass(frozen=True, kw_only=True)
class LimitTable:
    models: Mapping[str, ModelLimit] = field(default_factory=dict)
    """By endpoint (normalized) or API-key variable name."""
    tools: Mapping[str, ToolLimit] = field(default_factory=dict)
    """By tool name; only tools with at least one limit."""
    window_s: int = 60

    @property
    def empty(self) -> bool:
        return not self.models and not self.tools

    def for_model(self, *, base_url: str, api_key_env: str | None) -> list[tuple[str, ModelLimit]]:
        """The limits a call to ``base_url`` with the key named ``api_key_env`` is held to,
        each with its shared key (``endpoint:<url>`` or ``key:<name>``; never a key's value)."""
        found = []
        endpoint = _endpoint(base_url)
        if endpoint in self.models:
            found.append((f"endpoint:{endpoint}", self.models[endpoint]))
        if api_key_env and api_key_env in self.models:
            found.append((f"key:{api_key_env}", self.models[api_key_env]))
        return found

    def for_tool(self, name: str) -> ToolLimit | None:
        return self.tools.get(name)


class ModelLimiter(Protocol):
    """What the model planner holds its call to (:mod:`warrant.broker.limits` implements it)."""

    def reserve(
        self, *, base_url: str, api_key_env: str | None, tokens: int, deadline_at: float
    ) -> AbstractContextManager[Callable[[int], None]]:
        """Wait (until ``deadline_at``, epoch seconds) for a request and ``tokens`` of every
        limit the call is held to; yields ``settle(used_tokens)`` (the reply's usage replaces
        the estimate). Raises ``PlannerFailure`` ``DEADLINE_REACHED`` if the deadline comes
        first."""
        ...


def estimate_tokens(payload: Mapping[str, Any] | str) -> int:
    """A request's tokens before the reply says: its compact JSON's characters / 4 (``payload``
    or the JSON text already made of it), plus :data:`COMPLETION_ESTIMATE_TOKENS` for the
    reply."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return len(text) // 4 + COMPLETION_ESTIMATE_TOKENS


def _refuse(message: str) -> SettingsInvalid:
    return SettingsInvalid(message, code=INVALID_LIMIT)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise _refuse(f"{where} must be an integer from 1 to {MAX_LIMIT}, not {value!r}")
    return value


def _fields(raw: Any, allowed: tuple[str, ...], where: str) -> dict[str, int]:
    if not isinstance(raw, Mapping) or not raw:
        raise _refuse(f"{where} must be an object with some of {', '.join(allowed)}")
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        raise _refuse(f"{where}: unknown limit {', '.join(unknown)} (known: {', '.join(allowed)})")
    return {k: _count(v, f"{where}.{k}") for k, v in raw.items()}


def _endpoint(url: str) -> str:
    return url.rstrip("/")


def _model_key(key: Any) -> str:
    if isinstance(key, str) and "://" in key and _ENDPOINT.match(key):
        return _endpoint(key)
    if isinstance(key, str) and _ENV_NAME.match(key):
        return key
    raise _refuse(
        f"WARRANT_MODEL_LIMITS key {key!r} is neither an endpoint URL (http[s]://host/...) nor "
        "the name of an API-key variable (A-Z, 0-9, _)"
    )


def _models(raw: Any) -> dict[str, ModelLimit]:
    if not isinstance(raw, Mapping):
        raise _refuse("WARRANT_MODEL_LIMITS must be a JSON object")
    models: dict[str, ModelLimit] = {}
    for key, value in raw.items():
        name = _model_key(key)
        models[name] = ModelLimit(**_fields(value, MODEL_FIELDS, f"WARRANT_MODEL_LIMITS[{key}]"))
    return models


def _declared(registry: Registry) -> dict[str, dict[str, int]]:
    """The contracts' limits by tool name: the strictest of its versions."""
    declared: dict[str, dict[str, int]] = {}
    for tool in registry:
        for name in TOOL_FIELDS:
            value = getattr(tool, name, None)
            if value is None:
                continue
            value = _count(value, f"tool {tool.name} {tool.version}: {name}")
            mine = declared.setdefault(tool.name, {})
            mine[name] = min(value, mine.get(name, value))
    return declared


def _tools(raw: Any, registry: Registry) -> dict[str, ToolLimit]:
    if not isinstance(raw, Mapping):
        raise _refuse("WARRANT_TOOL_LIMITS must be a JSON object")
    merged = _declared(registry)
    names = set(registry.names())
    for name, value in raw.items():
        if name not in names:
            raise _refuse(f"WARRANT_TOOL_LIMITS names {name!r}, which is not a registered tool")
        merged.setdefault(name, {}).update(
            _fields(value, TOOL_FIELDS, f"WARRANT_TOOL_LIMITS[{name}]")
        )
    return {name: ToolLimit(**values) for name, values in merged.items() if values}


def limit_table(settings: WarrantSettings, registry: Registry) -> LimitTable:
    """The deployment's limits, checked (``INVALID_LIMIT`` otherwise)."""
    return LimitTable(
        models=_models(settings.model_limits),
        tools=_tools(settings.tool_limits, registry),
        window_s=settings.limits_window_s,
    )


def limits_url(settings: WarrantSettings, broker_url: str | None) -> str | None:
    """The Redis the limits are kept in: ``WARRANT_LIMITS_URL``, else a Redis broker's."""
    if settings.limits_url:
        return settings.limits_url
    if broker_url and broker_url.startswith(("redis://", "rediss://", "redis+socket://")):
        return broker_url
    return None


def check_storage(table: LimitTable, url: str | None) -> None:
    """Limits need a Redis: refused at start when there is none (an AMQP broker and no
    ``WARRANT_LIMITS_URL``)."""
    if not table.empty and url is None:
        raise _refuse(
            "shared limits are declared but there is no Redis to keep them: set "
            "WARRANT_LIMITS_URL (the broker is not Redis)"
        )
