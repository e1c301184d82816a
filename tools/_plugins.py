"""Where tools come from: built-in tools, installed plug-ins, ``WARRANT_TOOLS`` and MCP servers.

One function, :func:`build_registry`, turns the settings into the :class:`Registry` that every
worker role, the CLI and the Python client use. Sources, in order:

1. the built-in tools (always);
2. the entry-point group ``warrant.tools`` of every installed distribution (switch off with
   ``WARRANT_PLUGIN_ENTRY_POINTS=0``);
3. each ``module:attr`` of ``WARRANT_TOOLS`` (comma-separated), e.g. the demo plug-in
   ``warrant_demo:plugin``;
4. the MCP servers declared in the file named by ``WARRANT_MCP_CONFIG``: each asked for its
   tools, except in the *declared* registry (``ask_mcp_servers=False``), which starts and asks
   no server (its MCP tools have their declared policy and an open input schema). That one is
   for what needs names, queues, time limits and masks only: the Celery app, the CLI's reads,
   ``warrant run view``, the approval inbox; never for the gate.

An entry point or reference may name a :class:`~warrant.tools._contract.Tool`, a list of them,
a :class:`Registry` or a :class:`Plugin` (tools plus the factory of the deps they need). The
same ``(name, version)`` from two sources is a start-up error naming both. Nothing in a run
spec can make a worker import code: only the deployment's settings and installed packages do.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from warrant.runner.errors import PluginError
from warrant.runner.loading import load_object
from warrant.runner.settings import WarrantSettings, load_settings
from warrant.tools._builtin import BUILTIN_TOOLS
from warrant.tools._contract import Tool
from warrant.tools._registry import DepsContext, Plugin, Registry

__all__ = [
    "BUILTIN_SOURCE",
    "DEMO_PLUGIN",
    "TOOLS_ENTRY_POINT_GROUP",
    "DepsContext",
    "Plugin",
    "build_registry",
    "load_object",
    "registry_for",
]

#: The entry-point group plug-in distributions register their tools under.
TOOLS_ENTRY_POINT_GROUP = "warrant.tools"
#: The demo and benchmark tools: off unless named in ``WARRANT_TOOLS``.
DEMO_PLUGIN = "warrant_demo:plugin"
#: The source name of the built-in tools.
BUILTIN_SOURCE = "builtin"


def as_plugin(obj: Any, *, source: str) -> Plugin:
    """A :class:`Plugin` from what an entry point or reference names."""
    if isinstance(obj, Plugin):
        return Plugin(
            name=obj.name, tools=tuple(obj.tools), deps=obj.deps, setup=obj.setup, source=source
        )
    if isinstance(obj, Tool):
        return Plugin(name=source, tools=(obj,), source=source)
    if isinstance(obj, Registry):
        return Plugin(name=source, tools=tuple(obj), source=source)
    if isinstance(obj, list | tuple) and all(isinstance(t, Tool) for t in obj):
        return Plugin(name=source, tools=tuple(obj), source=source)
    raise PluginError(
        f"{source} is a {type(obj).__name__}, not a Tool, a list of tools, a Registry or a Plugin",
        code="PLUGIN_LOAD_FAILED",
    )


def _entry_point_plugins() -> Iterable[Plugin]:
    for ep in sorted(metadata.entry_points(group=TOOLS_ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep.dist, "name", None) or "?"
        source = f"entry point {ep.name!r} ({ep.value}, from {dist})"
        try:
            obj = ep.load()
        except Exception as exc:
            raise PluginError(f"cannot load {source}: {exc}", code="PLUGIN_LOAD_FAILED") from exc
        yield as_plugin(obj, source=source)


def split_refs(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def plugins_for(settings: WarrantSettings, *, ask_mcp_servers: bool = True) -> list[Plugin]:
    """Every tool source the settings name, built-in first."""
    plugins = [Plugin(name=BUILTIN_SOURCE, tools=tuple(BUILTIN_TOOLS), source=BUILTIN_SOURCE)]
    if settings.plugin_entry_points:
        plugins.extend(_entry_point_plugins())
    for ref in split_refs(settings.tools):
        plugins.append(as_plugin(load_object(ref), source=f"WARRANT_TOOLS {ref}"))
    if settings.mcp_config is not None:
        from warrant.tools._mcp import mcp_plugins  # lazy: MCP client only when a config names it

        plugins.extend(mcp_plugins(settings.mcp_config, ask_servers=ask_mcp_servers))
    return plugins


def build_registry(
    settings: WarrantSettings | None = None, *, ask_mcp_servers: bool = True
) -> Registry:
    """The registry the settings describe (see the module docstring). Raises
    :class:`PluginError` (``TOOL_CONFLICT``) when two sources declare one name and version."""
    settings = settings or load_settings()
    seen: dict[tuple[str, str], Plugin] = {}
    unique: list[Plugin] = []
    for plugin in plugins_for(settings, ask_mcp_servers=ask_mcp_servers):
        if any(p.source == plugin.source for p in unique):
            continue  # the same entry point named twice (e.g. also in WARRANT_TOOLS)
        for tool in plugin.tools:
            key = (tool.name, tool.version)
            other = seen.get(key)
            if other is not None:
                raise PluginError(
                    f"tool {tool.name} version {tool.version} is declared by {other.source} "
                    f"and by {plugin.source}",
                    code="TOOL_CONFLICT",
                )
            seen[key] = plugin
        unique.append(plugin)
    return Registry.from_plugins(unique)


@functools.lru_cache(maxsize=8)
def _cached(tools: str, mcp_config: str | None, entry_points: bool, ask: bool = True) -> Registry:
    settings = load_settings().model_copy(
        update={
            "tools": tools,
            "mcp_config": Path(mcp_config) if mcp_config else None,
            "plugin_entry_points": entry_points,
        }
    )
    return build_registry(settings, ask_mcp_servers=ask)


def registry_for(
    settings: WarrantSettings | None = None, *, ask_mcp_servers: bool = True
) -> Registry:
    """:func:`build_registry`, built once per process for the same tool settings;
    ``ask_mcp_servers=False``: the declared registry (no MCP server is started or asked)."""
    settings = settings or load_settings()
    mcp = str(settings.mcp_config) if settings.mcp_config is not None else None
    if mcp is None:
        ask_mcp_servers = True  # the same registry either way: one cache entry
    return _cached(settings.tools, mcp, settings.plugin_entry_points, ask_mcp_servers)
