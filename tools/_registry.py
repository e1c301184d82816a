"""The registry: the only place a tool name and version resolve to code; and the
:class:`Plugin` (a set of tools and the factory of what they need) each tool comes from.

Built from the deployment's settings by :func:`warrant.tools._plugins.build_registry`; every
worker role, the CLI and the client use that one function.
"""

from __future__ import annotations

__layer__ = "pure core"

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from warrant.runner.canonical import canonical_json, sha256_hex
from warrant.runner.codes import ErrorCode
from warrant.runner.errors import PluginError
from warrant.runner.scopes import ResourceKind
from warrant.tools._contract import Attribution, Tool, effect_key_problem, verification_problem

if TYPE_CHECKING:
    from warrant.runner.settings import WarrantSettings

__all__ = ["DepsContext", "Plugin", "Registry"]


@dataclass(frozen=True)
class DepsContext:
    """What a deps factory is given, once per worker process."""

    settings: WarrantSettings
    """The deployment's settings."""
    database_url: str
    """The ledger's URL (a plug-in may keep its own tables there, or ignore it)."""
    engine: Any = None
    """The ledger's SQLAlchemy engine, shared with the stages."""

    def secret(self, name: str) -> str:
        """A secret by name, from the worker's environment; missing is an error naming it."""
        value = os.environ.get(name)
        if value is None:
            raise PluginError(
                f"secret {name!r} is not set in the worker's environment", code="SECRET_MISSING"
            )
        return value


@dataclass(frozen=True, kw_only=True)
class Plugin:
    """A set of tools and what they need. Register one under the entry-point group
    ``warrant.tools``, or name it in ``WARRANT_TOOLS=module:attr``."""

    name: str
    """Shown by ``warrant tools list`` and in errors."""
    tools: Sequence[Tool[Any, Any]] = ()
    """The tools; each ``(name, version)`` must be unique across all sources."""
    deps: Callable[[DepsContext], Any] | None = None
    """Builds the object these tools see as ``ctx.deps``, once per worker process. If it has
    ``close()`` (or is a context manager) it is closed when the worker shuts down. Without it,
    the tools get the deployment's ``WARRANT_TOOL_DEPS`` object, else the ledger's stores."""
    setup: Callable[[DepsContext], None] | None = None
    """Idempotent set-up (e.g. the plug-in's own tables), run by ``warrant db upgrade``,
    ``warrant up`` and ``warrant demo``."""
    source: str = field(default="", compare=False)
    """Where it was loaded from (filled in by the loader)."""


class Registry:
    """An immutable set of tools keyed by ``(name, version)``, each with the plug-in it came
    from."""

    def __init__(self, tools: Iterable[Tool[Any, Any]], *, plugins: Iterable[Plugin] = ()) -> None:
        self._tools: dict[tuple[str, str], Tool[Any, Any]] = {}
        self._plugin: dict[tuple[str, str], Plugin] = {}
        for tool in tools:
            key = (tool.name, tool.version)
            if key in self._tools:
                raise ValueError(f"tool {tool.name} version {tool.version} declared twice")
            if (problem := effect_key_problem(tool)) is not None:
                raise PluginError(
                    f"tool {tool.name} version {tool.version}: {problem}",
                    code=ErrorCode.EFFECT_KEY_INVALID,
                )
            if (problem := verification_problem(tool)) is not None:
                raise PluginError(
                    f"tool {tool.name} version {tool.version}: {problem}",
                    code=ErrorCode.WRITE_UNVERIFIED,
                )
            self._tools[key] = tool
        self._plugins = tuple(plugins)
        for plugin in self._plugins:
            for tool in plugin.tools:
                self._plugin[(tool.name, tool.version)] = plugin
        self._fingerprint: str | None = None
        self._attributions: dict[str, Attribution] | None = None

    @classmethod
    def from_plugins(cls, plugins: Iterable[Plugin]) -> Registry:
        plugins = list(plugins)
        return cls([t for p in plugins for t in p.tools], plugins=plugins)

    def get(self, name: str, version: str) -> Tool[Any, Any] | None:
        return self._tools.get((name, version))

    def by_name(self, name: str) -> list[Tool[Any, Any]]:
        return [t for (n, _), t in self._tools.items() if n == name]

    def attributions(self) -> dict[str, Attribution]:
        """Tool name -> its output's :class:`~warrant.tools._contract.Attribution` (tools
        that declare one; observations name their tool, not its version). Built once."""
        if self._attributions is None:
            tools = self._tools.values()
            self._attributions = {t.name: t.attribution for t in tools if t.attribution}
        return self._attributions

    def listings(self) -> dict[str, Mapping[str, ResourceKind]]:
        """Tool name -> its output's listed resources (``Tool.listing``; tools that declare
        them)."""
        return {t.name: t.listing for t in self._tools.values() if t.listing}

    def privates(self) -> dict[str, frozenset[str]]:
        """Tool name -> its output's private fields (``Tool.private``; tools that declare
        them)."""
        return {t.name: t.private for t in self._tools.values() if t.private}

    def unverified(self) -> frozenset[tuple[str, str]]:
        """``(name, version)`` of the writes whose success is their own word
        (``Tool.unverified``): a success condition they satisfy says so."""
        return frozenset((t.name, t.version) for t in self._tools.values() if not t.verified)

    def names(self) -> list[str]:
        return sorted({name for name, _ in self._tools})

    def keys(self) -> list[str]:
        """``name@version`` of every tool, sorted."""
        return sorted(f"{n}@{v}" for n, v in self._tools)

    def queues(self) -> list[str]:
        return sorted({t.queue for t in self._tools.values()})

    def max_timeout_s(self) -> float:
        return max((t.timeout_s for t in self._tools.values()), default=0.0)

    @property
    def plugins(self) -> tuple[Plugin, ...]:
        return self._plugins

    def plugin_of(self, tool: Tool[Any, Any]) -> Plugin | None:
        """The plug-in ``tool`` came from (``None`` for a registry built from bare tools)."""
        return self._plugin.get((tool.name, tool.version))

    def source_of(self, tool: Tool[Any, Any]) -> str:
        plugin = self.plugin_of(tool)
        return plugin.source if plugin is not None else "registry"

    @property
    def fingerprint(self) -> str:
        """SHA-256 of every contract, canonical JSON: two processes with the same tools (names,
        versions, schemas, policies) have the same fingerprint."""
        if self._fingerprint is None:
            self._fingerprint = sha256_hex(canonical_json([t.describe() for t in self]))
        return self._fingerprint

    def __iter__(self) -> Iterator[Tool[Any, Any]]:
        return iter(sorted(self._tools.values(), key=lambda t: (t.name, t.version)))

    def __len__(self) -> int:
        return len(self._tools)
