"""Tool contract, registry and the built-in tools."""

from warrant.tools.contract import (
    ConfirmationPolicy,
    ReconcileResult,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
)
from warrant.tools.registry import Registry, default_registry

__all__ = [
    "ConfirmationPolicy",
    "ReconcileResult",
    "Registry",
    "SideEffect",
    "Tool",
    "ToolContext",
    "ToolInput",
    "ToolOutput",
    "default_registry",
]
