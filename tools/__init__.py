"""Everything a tool author needs, in one import: the contract (:class:`Tool`, its input and
output models, :class:`ToolContext`), the errors a tool raises, where its output comes from,
long-running jobs, batches and the plug-in that ships them. The names are pinned
(``tests/unit/test_public_api.py``). The modules behind them are private (``_contract``,
``_registry``, ...): import from here. One more face is public: :mod:`warrant.tools.blocking`
(sockets and HTTP clients a cancel reaches)."""

__layer__ = "adapters"

from warrant.runner.codes import ObservationSource
from warrant.runner.errors import (
    ToolError,
    ToolFailed,
    ToolInterrupted,
    ToolPermissionDenied,
    ToolRejected,
    ToolUnknown,
)
from warrant.runner.scopes import ResourceKind
from warrant.tools._batches import Batch, ItemResult, ItemStatus
from warrant.tools._contract import (
    Accepted,
    Attribution,
    ConfirmationPolicy,
    FlagAction,
    Isolation,
    JobHooks,
    JobState,
    JobStatus,
    OnError,
    PreconditionContext,
    ReconcileResult,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
    UntrustedPolicy,
)
from warrant.tools._plugins import build_registry
from warrant.tools._registry import DepsContext, Plugin, Registry

__all__ = [
    "Accepted",
    "Attribution",
    "Batch",
    "ConfirmationPolicy",
    "DepsContext",
    "FlagAction",
    "Isolation",
    "ItemResult",
    "ItemStatus",
    "JobHooks",
    "JobState",
    "JobStatus",
    "ObservationSource",
    "OnError",
    "Plugin",
    "PreconditionContext",
    "ReconcileResult",
    "Registry",
    "ResourceKind",
    "SideEffect",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolFailed",
    "ToolInput",
    "ToolInterrupted",
    "ToolOutput",
    "ToolPermissionDenied",
    "ToolRejected",
    "ToolUnknown",
    "UntrustedPolicy",
    "build_registry",
]

from warrant._namespace import only_as_warrant

only_as_warrant(__name__, "tools")  # a bare `import tools` from the repository root fails here
