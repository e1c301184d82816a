"""The deps each tool sees as ``ctx.deps``: built once per worker process, closed at shutdown.

Built-in tools get the ledger's stores. A plug-in with its own factory gets that factory's
object; other plug-in tools get the deployment's ``WARRANT_TOOL_DEPS`` object if it is set,
else the ledger's stores. Factories run lazily, the first time one of their tools is called.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from warrant.ledger.db import engine_for
from warrant.ledger.delegation import SubRuns
from warrant.ledger.stores import LedgerToolDeps
from warrant.runner.delegation import scope_kinds
from warrant.runner.settings import WarrantSettings, load_settings
from warrant.tools._contract import Tool
from warrant.tools._plugins import BUILTIN_SOURCE, DepsContext, load_object, registry_for
from warrant.tools._registry import Registry

__all__ = ["ToolDepsSet"]


class ToolDepsSet:
    """Per-plug-in deps objects for one worker process."""

    def __init__(
        self,
        registry: Registry,
        *,
        engine: Engine,
        settings: WarrantSettings,
        database_url: str = "",
        publish_run: Callable[[str], None] | None = None,
        revoke_run: Callable[[str, bool], None] | None = None,
    ) -> None:
        runs = SubRuns(engine, kinds=scope_kinds(registry), publish=publish_run, revoke=revoke_run)
        self.ledger = LedgerToolDeps(engine, runs=runs)
        self._registry = registry
        self._context = DepsContext(settings=settings, database_url=database_url, engine=engine)
        self._deployment_ref = settings.tool_deps
        self._built: dict[str, Any] = {}
        self._stack = contextlib.ExitStack()
        self._lock = threading.Lock()

    def for_tool(self, tool: Tool[Any, Any]) -> Any:
        plugin = self._registry.plugin_of(tool)
        if plugin is None or plugin.source == BUILTIN_SOURCE:
            return self.ledger
        if plugin.deps is not None:
            return self._build(plugin.source, plugin.deps)
        if self._deployment_ref:
            return self._build("WARRANT_TOOL_DEPS", self._deployment_factory)
        return self.ledger

    def _deployment_factory(self, ctx: DepsContext) -> Any:
        factory: Callable[[DepsContext], Any] = load_object(self._deployment_ref or "")
        return factory(ctx)

    def _build(self, key: str, factory: Callable[[DepsContext], Any]) -> Any:
        with self._lock:
            if key not in self._built:
                obj = factory(self._context)
                if hasattr(obj, "__enter__") and hasattr(obj, "__exit__"):
                    obj = self._stack.enter_context(obj)
                elif callable(getattr(obj, "close", None)):
                    self._stack.callback(obj.close)
                self._built[key] = obj
            return self._built[key]

    def run_setup(self) -> list[str]:
        """Each plug-in's idempotent set-up step; returns the plug-ins that had one."""
        done = []
        for plugin in self._registry.plugins:
            if plugin.setup is not None:
                plugin.setup(self._context)
                done.append(plugin.name)
        return done

    def close(self) -> None:
        """Close every deps object built so far (worker shutdown)."""
        with self._lock:
            self._built.clear()
            self._stack.close()


def setup_plugins(database_url: str, settings: WarrantSettings | None = None) -> list[str]:
    """Run every enabled plug-in's set-up step (``warrant db upgrade``, ``up``, ``demo``)."""
    settings = settings or load_settings()
    engine = engine_for(database_url)
    deps = ToolDepsSet(
        registry_for(settings, ask_mcp_servers=False),  # MCP servers have no set-up step
        engine=engine,
        settings=settings,
        database_url=database_url,
    )
    try:
        return deps.run_setup()
    finally:
        deps.close()
