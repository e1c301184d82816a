"""The gate's authorization layer: a live, unexhausted grant in scope for every capability.

A tool that declares typed ``resources`` has each value of each resource argument (each
element of a list) matched against the grant scopes by kind (:mod:`warrant.runner.scopes`);
every value must be covered. A tool without them keeps the one-string ``resource`` and the
exact / ``*`` / prefix match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from warrant.runner import scopes
from warrant.runner.codes import Rejection
from warrant.runner.views import GrantView, RunView
from warrant.tools.contract import Tool

__all__ = ["Authorization", "authorize", "resource_label"]


@dataclass(frozen=True)
class Authorization:
    code: str | None
    """``None`` when allowed, else the rejection code."""
    grant_ids: tuple[int, ...] = ()


def resource_label(
    tool: Tool[Any, Any], model: Any, arguments: dict[str, Any], subject: str
) -> str:
    """What the call acts on, for the trace and a person's confirmation request."""
    if not tool.resources:
        return tool.resource(model, subject)
    parts = []
    for name in sorted(tool.resources):
        value = arguments.get(name)
        if value is not None:
            shown = value if isinstance(value, str) else ",".join(map(str, value))
            parts.append(f"{name}={shown}")
    return "; ".join(parts)[:500]


def authorize(
    tool: Tool[Any, Any],
    *,
    resource: str,
    arguments: dict[str, Any],
    grants: Sequence[GrantView],
    run: RunView,
) -> Authorization:
    used: list[int] = []
    for capability in tool.capabilities:
        held = [g for g in grants if g.capability == capability and g.run_id == run.run_id]
        if not held:
            return Authorization(Rejection.MISSING_CAPABILITY.value)
        try:
            needs = _needs(tool, resource, arguments)
        except scopes.InvalidResource:
            return Authorization(Rejection.RESOURCE_INVALID.value)
        for matches in needs:
            code, grant_id = _one(held, matches, run.step)
            if code:
                return Authorization(code)
            if grant_id not in used:
                used.append(grant_id)  # type: ignore[arg-type]
    return Authorization(None, tuple(used))


def _needs(tool: Tool[Any, Any], resource: str, arguments: dict[str, Any]) -> list[Any]:
    """One predicate per value that needs a grant in scope: ``scope -> covered?``."""
    if not tool.resources:
        return [lambda scope: scopes.legacy_covers(scope, resource)]
    needs = []
    for name, kind in sorted(tool.resources.items()):
        argument = arguments.get(name)
        if argument is None:
            continue
        for value in scopes.values_of(argument):
            scopes.normalize(kind, value)  # an invalid value is refused, not just out of scope
            needs.append(lambda scope, kind=kind, value=value: _covers(kind, scope, value))
    return needs


def _covers(kind: scopes.ResourceKind, scope: str, value: str) -> bool:
    try:
        return scopes.covers(kind, scope, value)
    except scopes.InvalidScope:
        return False


def _one(held: Sequence[GrantView], covers: Any, step: int) -> tuple[str | None, int | None]:
    in_scope = [g for g in held if covers(g.resource_scope)]
    if not in_scope:
        return Rejection.RESOURCE_OUT_OF_SCOPE.value, None
    live = [g for g in in_scope if g.expires_at_step is None or g.expires_at_step >= step]
    if not live:
        return Rejection.GRANT_EXPIRED.value, None
    usable = [g for g in live if g.max_uses is None or g.uses < g.max_uses]
    if not usable:
        return Rejection.GRANT_EXHAUSTED.value, None
    return None, usable[0].grant_id
