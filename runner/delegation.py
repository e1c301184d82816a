"""Sub-runs with delegated authority: what a ``delegate`` call may give the child it starts.

A run that holds a grant of ``runs:delegate`` (and whose ``policy.max_delegation_depth`` is at
least 1) may propose the built-in tool ``delegate``: a goal, a planner, grants and budgets for a
child run. Each hop can only narrow (CTRLRun's G9 and G25):

* every grant asked for must be held by a live grant of the parent at least as wide: the same
  capability, a scope inside the parent's (checked for every resource kind a tool of that
  capability reads it as), no later wall-clock expiry, no more uses than the parent has left
  (those uses are reserved), the parent's argument constraints kept or tightened
  (``GrantConstraints.within``: a ``max`` no higher, an ``in`` set no larger), and never a
  task-scoped grant (its sources would be the child's goal, which the parent's planner wrote);
* every budget is carved out of what the parent has left (model calls, tool calls, tokens,
  cost, time): reserved at the spawn, the unused rest given back when the child ends;
* the child's own depth is the parent's less one, its fan-out the parent's.

The gate's delegation layer calls :func:`terms` before anything exists (a refusal names its code:
``DELEGATION_WIDENS_GRANT``, ``DELEGATION_OVER_BUDGET``, ``DELEGATION_TOO_DEEP``,
``DELEGATION_FAN_OUT``); the spawn calls it again under the parent's row lock, on the ledger's
state then, so nothing that changed in between widens anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from warrant.runner.codes import Rejection
from warrant.runner.scopes import InvalidScope, ResourceKind, covers, validate_scope
from warrant.runner.spec import (
    DEFAULT_MAX_CHILDREN,
    DEFAULT_MAX_DELEGATION_DEPTH,
    Budgets,
    Grant,
)
from warrant.runner.views import GrantView, RunView

if TYPE_CHECKING:  # the gate's input imports the tools' contract, whose package imports this
    from warrant.runner.gate import GateInput

__all__ = [
    "DELEGATE_CAPABILITY",
    "DELEGATE_TOOL",
    "Refusal",
    "Request",
    "Reservation",
    "Terms",
    "gate_terms",
    "scope_kinds",
    "scope_within",
    "terms",
]

#: The built-in tool that starts a child run, and the capability it needs.
DELEGATE_TOOL = "delegate"
DELEGATE_CAPABILITY = "runs:delegate"

_WILDCARDS = frozenset("*?[")


class Request(Protocol):
    """A ``delegate`` call's validated arguments (``warrant.tools._builtin.DelegateInput``)."""

    @property
    def goal(self) -> str: ...
    @property
    def planner(self) -> Any: ...
    @property
    def grants(self) -> Sequence[Grant]: ...
    @property
    def budgets(self) -> Mapping[str, Any]: ...


class _Tool(Protocol):
    @property
    def capabilities(self) -> Sequence[str]: ...
    @property
    def resources(self) -> Mapping[str, ResourceKind]: ...


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """What the spawn takes from the parent's counters (given back, less what the child used,
    when the child ends). ``None``: the parent has no such limit, nothing is reserved."""

    model_calls: int | None
    tool_calls: int
    tokens: int | None
    cost: float | None
    grant_uses: tuple[tuple[int, int, int], ...] = ()
    """(the child's grant index, the parent's grant id, uses) reserved for each of the
    child's grants with ``max_uses``."""

    def as_json(self) -> dict[str, Any]:
        return {
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "cost": self.cost,
            "grant_uses": [list(pair) for pair in self.grant_uses],
        }


@dataclass(frozen=True, kw_only=True)
class Terms:
    """The child the gate lets a ``delegate`` call start."""

    spec: dict[str, Any]
    """The child's run spec (validated by the spawn like any spec)."""
    reserved: Reservation
    depth: int
    """The child's own ``max_delegation_depth``."""


ScopeKinds = Callable[[str], frozenset[ResourceKind | None]]
"""Capability → the resource kinds its tools read a scope as (``None``: untyped)."""


def scope_kinds(tools: Iterable[_Tool]) -> ScopeKinds:
    """How the deployment's ``tools`` read a grant's scope, per capability: each typed
    resource's kind, ``None`` for a tool with one untyped resource label."""
    table: dict[str, set[ResourceKind | None]] = {}
    for tool in tools:
        read: set[ResourceKind | None] = set(tool.resources.values()) or {None}
        for capability in tool.capabilities:
            table.setdefault(capability, set()).update(read)
    frozen = {c: frozenset(k) for c, k in table.items()}
    return lambda capability: frozen.get(capability, frozenset({None}))


def gate_terms(request: Request, inp: GateInput) -> Terms | Refusal:
    """:func:`terms` as the gate judges a ``delegate`` call: on the run, grants and policy of
    ``inp``, before the call is counted."""
    return terms(
        request,
        parent=inp.run,
        grants=inp.grants,
        run_policy=inp.run_policy,
        kinds=scope_kinds(inp.registry),
        now=inp.now,
        counted=False,
    )


def terms(
    request: Request,
    *,
    parent: RunView,
    grants: Sequence[GrantView],
    run_policy: Mapping[str, Any],
    kinds: ScopeKinds,
    now: float,
    counted: bool,
) -> Terms | Refusal:
    """The child's terms, or why there is none. ``counted``: the parent's tool-call counter
    already holds this ``delegate`` call (at the spawn; at the gate it does not yet)."""
    depth = int(run_policy.get("max_delegation_depth", DEFAULT_MAX_DELEGATION_DEPTH))
    if depth < 1:
        return Refusal(Rejection.DELEGATION_TOO_DEEP.value, "this run may start no sub-run")
    children = parent.tool_calls_by_tool.get(DELEGATE_TOOL, 0) - (1 if counted else 0)
    if children >= int(run_policy.get("max_children", DEFAULT_MAX_CHILDREN)):
        return Refusal(Rejection.DELEGATION_FAN_OUT.value, f"{children} sub-runs started already")
    uses = _granted(request.grants, grants, kinds, step=parent.step, now=now)
    if isinstance(uses, Refusal):
        return uses
    carved = _carved(request.budgets, parent, now=now, counted=counted)
    if isinstance(carved, Refusal):
        return carved
    budgets, reserved = carved
    external = getattr(request.planner, "kind", None) == "external"
    if budgets.get("max_model_calls") == 0 and not external:
        return Refusal(  # a planner with no model call left could only fail
            Rejection.DELEGATION_OVER_BUDGET.value, "budgets.max_model_calls: none left"
        )
    policy = {**run_policy, "max_delegation_depth": depth - 1}
    route = getattr(request, "route", None)
    if isinstance(route, Mapping) and route.get("high_risk"):
        policy["confirm_writes"] = True  # a router's high-risk branch: every write asks a person
    spec = {
        "goal": request.goal,
        "subject": parent.subject,
        "planner": request.planner.model_dump(mode="json"),
        "grants": [g.model_dump(mode="json", exclude_none=True) for g in request.grants],
        "budgets": budgets,
        "policy": policy,
    }
    return Terms(
        spec=spec,
        reserved=Reservation(**reserved, grant_uses=tuple(uses)),
        depth=depth - 1,
    )


# --- grants ----------------------------------------------------------------------------------


def _granted(
    asked: Sequence[Grant],
    held: Sequence[GrantView],
    kinds: ScopeKinds,
    *,
    step: int,
    now: float,
) -> list[tuple[int, int, int]] | Refusal:
    """For each grant asked, a parent grant that holds it (uses reserved from it), in order."""
    left = {g.grant_id: (None if g.max_uses is None else g.max_uses - g.uses) for g in held}
    reserved: list[tuple[int, int, int]] = []
    for index, grant in enumerate(asked):
        parent = _holder(grant, held, left, kinds(grant.capability), step=step, now=now)
        if parent is None:
            return Refusal(
                Rejection.DELEGATION_WIDENS_GRANT.value,
                f"grants.{index}: no live grant of {grant.capability!r} holds scope "
                f"{grant.resource_scope!r} with these uses, expiry and constraints",
            )
        if grant.max_uses is not None and left[parent.grant_id] is not None:
            left[parent.grant_id] = (left[parent.grant_id] or 0) - grant.max_uses
            reserved.append((index, parent.grant_id, grant.max_uses))
    return reserved


def _holder(
    grant: Grant,
    held: Sequence[GrantView],
    left: Mapping[int, int | None],
    kinds: frozenset[ResourceKind | None],
    *,
    step: int,
    now: float,
) -> GrantView | None:
    if grant.destinations_from:
        return None  # its sources would be the child's own goal: never delegated
    expires = None if grant.expires_at is None else grant.expires_at.timestamp()
    for parent in sorted(held, key=lambda g: g.grant_id):
        if parent.capability != grant.capability or parent.destinations_from:
            continue
        if not parent.live(step=step, now=now):
            continue
        if parent.expires_at is not None and (expires is None or expires > parent.expires_at):
            continue
        uses = left.get(parent.grant_id)
        if uses is not None and (grant.max_uses is None or grant.max_uses > uses):
            continue
        if parent.constraints is not None and not (
            grant.constraints is not None and grant.constraints.within(parent.constraints)
        ):
            continue  # a child's constraints keep or tighten the parent's, never drop them
        if scope_within(grant.resource_scope, parent.resource_scope, kinds):
            return parent
    return None


def scope_within(child: str, parent: str, kinds: Iterable[ResourceKind | None]) -> bool:
    """Whether every value scope ``child`` covers, ``parent`` covers too, under each way a tool
    reads a scope (``kinds``: untyped prefix matching, or a typed resource kind). Conservative:
    a scope it cannot prove narrower is not."""
    if parent == "*" or child == parent:
        return True
    if child == "*":
        return False
    return all(_within_kind(child, parent, kind) for kind in set(kinds) or {None})


def _within_kind(child: str, parent: str, kind: ResourceKind | None) -> bool:
    if kind is None:  # untyped: exact, or a text prefix ending in ``*``
        if child.endswith("*"):
            return parent.endswith("*") and child[:-1].startswith(parent[:-1])
        return parent.endswith("*") and child.startswith(parent[:-1])
    if kind is ResourceKind.IDENTIFIER:
        return _identifier_within(child, parent)
    try:  # another typed kind: the same canonical scope, or a path below the parent's
        same = validate_scope(kind, child) == validate_scope(kind, parent)
    except InvalidScope:
        return False
    if same:
        return True
    if _WILDCARDS & set(child) or _WILDCARDS & set(parent):
        return False
    return kind is ResourceKind.PATH and covers(kind, parent, child)


def _identifier_within(child: str, parent: str) -> bool:
    """Identifiers match with ``fnmatch``: a literal child inside the parent's pattern, or a
    child prefix pattern under a parent prefix pattern."""
    if not _WILDCARDS & set(child):
        return fnmatchcase(child, parent)
    head = parent[:-1]
    return (
        parent.endswith("*")
        and not _WILDCARDS & set(head)
        and child.endswith("*")
        and not _WILDCARDS & set(child[:-1])
        and child.startswith(head)
    )


# --- budgets ---------------------------------------------------------------------------------


def _carved(
    asked: Mapping[str, Any], parent: RunView, *, now: float, counted: bool
) -> tuple[dict[str, Any], dict[str, Any]] | Refusal:
    """The child's budgets and what they reserve, each within the parent's remainder."""
    b = parent.budgets
    left: dict[str, float | None] = {
        "max_model_calls": None
        if b.max_model_calls is None
        else b.max_model_calls - parent.model_calls,
        "max_tool_calls": b.max_tool_calls - parent.tool_calls - (0 if counted else 1),
        "max_tokens": None if b.max_tokens is None else b.max_tokens - parent.tokens_used,
        "max_cost": None if b.max_cost is None else b.max_cost - parent.cost_used,
        "deadline_s": math.floor(max(0.0, parent.deadline_at - now)),
    }
    defaults = Budgets()
    budgets = dict(asked)
    for name, remaining in left.items():
        default = getattr(defaults, name)
        if name not in asked:
            budgets[name] = _smaller(default, remaining)
        elif remaining is not None and (asked[name] is None or _over(asked[name], remaining)):
            return Refusal(
                Rejection.DELEGATION_OVER_BUDGET.value,
                f"budgets.{name}: {asked[name]!r} asked, the parent has {remaining!r} left",
            )
    if budgets["deadline_s"] is not None and budgets["deadline_s"] <= 0:
        return Refusal(Rejection.DELEGATION_OVER_BUDGET.value, "budgets.deadline_s: no time left")
    try:
        checked = Budgets.model_validate(budgets)
    except ValidationError as exc:
        field = ".".join(str(p) for p in exc.errors()[0]["loc"])
        return Refusal(Rejection.DELEGATION_OVER_BUDGET.value, f"budgets.{field}: not valid")
    reserved = {
        "model_calls": None if left["max_model_calls"] is None else checked.max_model_calls,
        "tool_calls": checked.max_tool_calls,
        "tokens": None if left["max_tokens"] is None else checked.max_tokens,
        "cost": None if left["max_cost"] is None else checked.max_cost,
    }
    return checked.model_dump(mode="json", exclude_defaults=False), reserved


def _smaller(default: Any, remaining: float | None) -> Any:
    if remaining is None:
        return default
    if default is None:
        return remaining
    return min(default, remaining)


def _over(asked: Any, remaining: float) -> bool:
    try:
        return float(asked) > remaining
    except (TypeError, ValueError):
        return True
