"""The gate's authorization layer: a live, unexhausted grant in scope for every capability.

A tool that declares typed ``resources`` has each value of each resource argument (each
element of a list) matched against the grant scopes by kind (:mod:`warrant.runner.scopes`);
every value must be covered. A tool without them keeps the one-string ``resource`` and the
exact / ``*`` / prefix match.

A **task-scoped** grant (``destinations_from``) covers a value only if, besides its scope,
the value is mentioned in one of the sources it names (the goal, the spec, a person's answers,
a trusted tool's observations), by the rules of :mod:`warrant.runner.mentions`. A one-string
``resource`` is mentioned whole or by what follows its ``kind:`` prefix
(``recipient:bob@example.com``: ``bob@example.com``). A value in scope that no narrowed grant's
sources mention is refused ``RESOURCE_NOT_IN_TASK``.

A grant with **constraints** (``Grant.constraints``, 000 §5: ``{"max": {"amount_cents":
10000}, "in": {"currency": ["EUR"]}}``) covers a call only if its validated arguments keep
every one (:meth:`~warrant.runner.spec.GrantConstraints.violation`); when no usable grant's
constraints do, the call is refused ``GRANT_CONSTRAINT_VIOLATED``, naming the argument and
the limit.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from warrant.runner import scopes
from warrant.runner.codes import ObservationSource, Rejection
from warrant.runner.errors import SpecError
from warrant.runner.gate import GateInput
from warrant.runner.mentions import fold, mentioned
from warrant.runner.spec import Grant
from warrant.runner.views import GrantView, ProvenanceSources
from warrant.tools._contract import Tool
from warrant.tools._registry import Registry

__all__ = [
    "Authorization",
    "authorize",
    "check_task_sources",
    "narrowed",
    "resource_label",
    "unheld_capability",
    "unknown_capabilities",
]

#: How a task-scoped grant names a trusted tool's observations: ``observations:<tool>``.
OBSERVATIONS = "observations:"


@dataclass(frozen=True)
class Authorization:
    code: str | None
    """``None`` when allowed, else the rejection code."""
    grant_ids: tuple[int, ...] = ()
    message: str | None = None
    """Why, for the planner (argument names, never values)."""


@dataclass(frozen=True)
class _Need:
    """One value that needs a grant in scope (and, for a task-scoped grant, in its sources)."""

    covers: Callable[[str], bool]
    """``scope -> covered?``"""
    argument: str
    kind: scopes.ResourceKind | None
    value: str


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
    tool: Tool[Any, Any], *, resource: str, arguments: dict[str, Any], inp: GateInput
) -> Authorization:
    """Grants of the run (``inp.grants``) covering every value; task-scoped ones read their
    sources from ``inp.provenance`` (none loaded: they cover nothing)."""
    used: list[int] = []
    run = inp.run
    for capability in tool.capabilities:
        held = [g for g in inp.grants if g.capability == capability and g.run_id == run.run_id]
        if not held:
            return Authorization(Rejection.MISSING_CAPABILITY.value)
        try:
            needs = _needs(tool, resource, arguments)
        except scopes.InvalidResource:
            return Authorization(Rejection.RESOURCE_INVALID.value)
        for need in needs:
            code, grant_id, why = _one(
                held, need, run.step, inp.provenance, now=inp.now, arguments=arguments
            )
            if code:
                return Authorization(code, message=why or _why(code, need, held))
            if grant_id not in used:
                used.append(grant_id)  # type: ignore[arg-type]
    return Authorization(None, tuple(used))


def unheld_capability(
    tool: Tool[Any, Any], grants: Sequence[GrantView], *, run_id: str
) -> str | None:
    """The first of ``tool``'s capabilities that no grant of the run names at all, whatever
    its resource scope, last step, expiry or uses (``None``: each one is held by some grant).
    The gate refuses such a call before it reads the arguments (``MISSING_CAPABILITY``)."""
    for capability in tool.capabilities:
        if not any(g.capability == capability and g.run_id == run_id for g in grants):
            return capability
    return None


def narrowed(tool: Tool[Any, Any], grants: Sequence[GrantView]) -> bool:
    """Does a task-scoped grant hold one of the tool's capabilities (so the gate needs the
    run's text even for a read)?"""
    return any(g.destinations_from and g.capability in tool.capabilities for g in grants)


def check_task_sources(grants: Sequence[Grant], registry: Registry, where: str = "grants") -> None:
    """At the run's start (or an operator's grant): every ``observations:<tool>`` a grant's
    ``destinations_from`` names is a tool the registry has, whose output is trusted (every
    version's contract declares ``output_source=trusted-tool``). Else :class:`SpecError`."""
    for index, grant in enumerate(grants):
        for at, name in enumerate(grant.destinations_from or ()):
            if not name.startswith(OBSERVATIONS):
                continue
            tool = name[len(OBSERVATIONS) :]
            tools = registry.by_name(tool)
            if not tools:
                message = f"no tool {tool} in this deployment's registry"
            elif any(t.output_source is not ObservationSource.TRUSTED_TOOL for t in tools):
                message = (
                    f"{tool}'s output is untrusted (its contract does not declare "
                    "output_source=trusted-tool): it cannot name a task's destinations"
                )
            else:
                continue
            field = f"{where}.{index}.destinations_from.{at}"
            raise SpecError(message, errors=[{"field": field, "message": message}])


def unknown_capabilities(grants: Sequence[Grant], registry: Registry) -> list[str]:
    """What a run's start warns of: each grant whose capability no tool of ``registry``
    requires, naming the closest one. A typo (``tickets:wirte``) would otherwise surface
    mid-run as ``MISSING_CAPABILITY``. A warning, not a refusal: the process starting the run
    may lack tools its workers have (an MCP server's, another plug-in's)."""
    known = sorted({c for tool in registry for c in tool.capabilities})
    said = []
    for index, grant in enumerate(grants):
        if grant.capability in known:
            continue
        close = difflib.get_close_matches(grant.capability, known, n=1, cutoff=0.6)
        said.append(
            f"grants.{index}: no tool of this process's registry requires capability "
            f"{grant.capability!r}"
            + (f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})")
        )
    return said


def _needs(tool: Tool[Any, Any], resource: str, arguments: dict[str, Any]) -> list[_Need]:
    """One need per value: ``scope -> covered?`` and what the value is."""
    if not tool.resources:
        return [
            _Need(lambda scope: scopes.legacy_covers(scope, resource), "resource", None, resource)
        ]
    needs = []
    for name, kind in sorted(tool.resources.items()):
        for value in scopes.resource_values(arguments, name):
            scopes.normalize(kind, value)  # an invalid value is refused, not just out of scope
            needs.append(_Need(partial(scopes.covers, kind, value=value), name, kind, value))
    return needs


def _in_task(grant: GrantView, need: _Need, sources: ProvenanceSources | None) -> bool:
    """A grant not narrowed covers any value in scope; a task-scoped one only a value its
    named sources mention (no sources loaded: nothing)."""
    if not grant.destinations_from:
        return True
    if sources is None:
        return False
    named = set(grant.destinations_from)
    folded = fold("\n".join(text for source, text in sources.task if source in named))
    forms = [need.value]
    if need.kind is None and ":" in need.value:  # a one-string resource: ``kind:value``
        forms.append(need.value.split(":", 1)[1])
    return any(mentioned(form, need.kind, folded) for form in forms if form.strip())


def _one(
    held: Sequence[GrantView],
    need: _Need,
    step: int,
    sources: ProvenanceSources | None,
    *,
    now: float,
    arguments: dict[str, Any],
) -> tuple[str | None, int | None, str | None]:
    """The grant that covers ``need`` (a usable one whose constraints the call keeps, the
    first by id), or the refusal's code and, for broken constraints, why."""
    in_scope = [g for g in held if need.covers(g.resource_scope)]
    if not in_scope:
        return Rejection.RESOURCE_OUT_OF_SCOPE.value, None, None
    in_task = [g for g in in_scope if _in_task(g, need, sources)]
    if not in_task:
        return Rejection.RESOURCE_NOT_IN_TASK.value, None, None
    live = [g for g in in_task if g.live(step=step, now=now)]
    if not live:
        return Rejection.GRANT_EXPIRED.value, None, None
    usable = [g for g in live if g.max_uses is None or g.uses < g.max_uses]
    if not usable:
        return Rejection.GRANT_EXHAUSTED.value, None, None
    broken = [g.constraints.violation(arguments) if g.constraints else None for g in usable]
    kept = [g for g, why in zip(usable, broken, strict=True) if why is None]
    if not kept:  # every usable grant's constraints refuse these arguments (000 §5)
        return Rejection.GRANT_CONSTRAINT_VIOLATED.value, None, broken[0]
    return None, kept[0].grant_id, None


def _why(code: str, need: _Need, held: Sequence[GrantView]) -> str | None:
    """The message of a ``RESOURCE_NOT_IN_TASK`` refusal: which argument, which sources."""
    if code != Rejection.RESOURCE_NOT_IN_TASK.value:
        return None
    named = sorted({s for g in held for s in g.destinations_from})
    return f"{need.argument}: a value in scope but mentioned in none of {', '.join(named)}"
