"""Tool contract, registry, plug-ins and the built-in tools."""

from warrant.tools.contract import (
    ConfirmationPolicy,
    FlagAction,
    Isolation,
    ReconcileResult,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
    UntrustedPolicy,
)
from warrant.tools.plugins import build_registry
from warrant.tools.registry import DepsContext, Plugin, Registry

__all__ = [
    "ConfirmationPolicy",
    "DepsContext",
    "FlagAction",
    "Isolation",
    "Plugin",
    "ReconcileResult",
    "Registry",
    "SideEffect",
    "Tool",
    "ToolContext",
    "ToolInput",
    "ToolOutput",
    "UntrustedPolicy",
    "build_registry",
]

from warrant._namespace import only_as_warrant

only_as_warrant(__name__, "tools")  # a bare `import tools` from the repository root fails here
