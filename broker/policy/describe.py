"""What a call's resources refer to, for the person asked to confirm it: the tool's
``describe_resources(args, deps, subject)`` hook (``Tool.describe_resources``), asked by the
policy stage when it requests a confirmation. Its answer is the service's words, not
the program's: bounded (:data:`MAX_FIELDS` entries of :data:`MAX_CHARS` characters, control
characters dropped), and a hook that fails says so instead of holding the request back."""

from __future__ import annotations

import logging
from typing import Any

from warrant.broker.context import StageContext
from warrant.runner import policy

__all__ = ["MAX_CHARS", "MAX_FIELDS", "described"]

log = logging.getLogger("warrant.policy")
MAX_FIELDS = 20
MAX_CHARS = 200
UNAVAILABLE = "(the service could not say)"


def _clean(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return "".join(ch for ch in text if ch.isprintable())[:MAX_CHARS]


def described(
    ctx: StageContext, decision: policy.AwaitConfirmation, subject: str
) -> dict[str, str]:
    """The tool's description of the call's resources ({} when it has no hook)."""
    tool = decision.tool
    if tool.describe_resources is None:
        return {}
    try:
        args = tool.parse_input(decision.arguments)
        said = tool.describe_resources(args, ctx.deps_for(tool), subject)
        items = list(dict(said).items())[:MAX_FIELDS]
    except Exception:  # the request goes to the person all the same
        log.warning("describe_resources failed for %s", tool.name, exc_info=True)
        return {"*": UNAVAILABLE}
    return {_clean(k)[:64]: _clean(v) for k, v in items}
