"""Tool contract, registry and the built-in tools."""

from tools.contract import ConfirmationPolicy, ReconcileResult, SideEffect, Tool, ToolContext
from tools.registry import Registry, default_registry

__all__ = [
    "ConfirmationPolicy",
    "ReconcileResult",
    "Registry",
    "SideEffect",
    "Tool",
    "ToolContext",
    "default_registry",
]
