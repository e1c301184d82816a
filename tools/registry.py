"""The registry: the only place a tool name and version resolve to code."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tools.contract import Tool

__all__ = ["Registry", "default_registry"]


class Registry:
    """An immutable set of tools keyed by ``(name, version)``."""

    def __init__(self, tools: Iterable[Tool[Any, Any]]) -> None:
        self._tools: dict[tuple[str, str], Tool[Any, Any]] = {}
        for tool in tools:
            key = (tool.name, tool.version)
            if key in self._tools:
                raise ValueError(f"tool {tool.name} version {tool.version} declared twice")
            self._tools[key] = tool

    def get(self, name: str, version: str) -> Tool[Any, Any] | None:
        return self._tools.get((name, version))

    def by_name(self, name: str) -> list[Tool[Any, Any]]:
        return [t for (n, _), t in self._tools.items() if n == name]

    def names(self) -> list[str]:
        return sorted({name for name, _ in self._tools})

    def queues(self) -> list[str]:
        return sorted({t.queue for t in self._tools.values()})

    def max_timeout_s(self) -> float:
        return max((t.timeout_s for t in self._tools.values()), default=0.0)

    def __iter__(self) -> Iterator[Tool[Any, Any]]:
        return iter(sorted(self._tools.values(), key=lambda t: (t.name, t.version)))

    def __len__(self) -> int:
        return len(self._tools)


_DEFAULT: Registry | None = None


def default_registry() -> Registry:
    """Built-in and demo tools. Deployments build their own :class:`Registry`."""
    global _DEFAULT
    if _DEFAULT is None:
        from tools.builtin import BUILTIN_TOOLS
        from tools.demo.tools import DEMO_TOOLS

        _DEFAULT = Registry([*BUILTIN_TOOLS, *DEMO_TOOLS])
    return _DEFAULT
