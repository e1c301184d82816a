"""Planner kinds from plug-ins: the entry-point group ``warrant.planners`` and
``WARRANT_PLANNERS=module:attr[,module:attr]``.

A kind is a name, a settings model and a function that builds a :class:`Planner` from
validated settings. A run spec names a kind and gives its settings
(``{"kind": "my-planner", "settings": {...}}``); the kind must be installed where the planner
workers run. The built-in kinds ``fixture`` and ``openai`` are not plug-ins.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from warrant.runner.errors import PluginError, SpecError
from warrant.runner.loading import load_object
from warrant.runner.spec import BUILTIN_PLANNER_KINDS, PluginPlannerSpec, RunSpec

if TYPE_CHECKING:
    from warrant.runner.planner_protocol import Planner

__all__ = ["PLANNERS_ENTRY_POINT_GROUP", "PlannerKind", "check_planner", "planner_kinds"]

#: The entry-point group plug-in distributions register planner kinds under.
PLANNERS_ENTRY_POINT_GROUP = "warrant.planners"


@dataclass(frozen=True, kw_only=True)
class PlannerKind:
    """A planner a plug-in provides."""

    name: str
    """What a run spec's ``planner.kind`` names."""
    settings_model: type[BaseModel]
    """Validates the spec's ``planner.settings``."""
    build: Callable[[Any], Planner]
    """Builds the planner from validated settings (in the planner worker, per step)."""


def _kinds_of(obj: Any, source: str) -> list[PlannerKind]:
    items = obj if isinstance(obj, list | tuple) else [obj]
    if not all(isinstance(k, PlannerKind) for k in items):
        raise PluginError(f"{source} is not a PlannerKind or a list of them")
    return list(items)


@functools.lru_cache(maxsize=8)
def _cached(refs: str, entry_points: bool) -> Mapping[str, PlannerKind]:
    found: dict[str, tuple[PlannerKind, str]] = {}
    sources: list[tuple[str, Any]] = []
    if entry_points:
        for ep in metadata.entry_points(group=PLANNERS_ENTRY_POINT_GROUP):
            sources.append((f"entry point {ep.name!r} ({ep.value})", ep.load))
    for ref in (r.strip() for r in refs.split(",") if r.strip()):
        sources.append((f"WARRANT_PLANNERS {ref}", functools.partial(load_object, ref)))
    for source, load in sources:
        for kind in _kinds_of(load(), source):
            if kind.name in BUILTIN_PLANNER_KINDS:
                raise PluginError(
                    f"{source}: {kind.name!r} is a built-in planner kind", code="PLANNER_CONFLICT"
                )
            if kind.name in found and found[kind.name][1] != source:
                raise PluginError(
                    f"planner kind {kind.name!r} is declared by {found[kind.name][1]} and by "
                    f"{source}",
                    code="PLANNER_CONFLICT",
                )
            found[kind.name] = (kind, source)
    return {name: kind for name, (kind, _) in found.items()}


def planner_kinds(*, refs: str = "", entry_points: bool = True) -> Mapping[str, PlannerKind]:
    """Every plug-in planner kind (cached per process)."""
    return _cached(refs, entry_points)


def resolve(spec: PluginPlannerSpec, kinds: Mapping[str, PlannerKind]) -> tuple[PlannerKind, Any]:
    """The kind and its validated settings, or :class:`SpecError` naming the field."""
    kind = kinds.get(spec.kind)
    if kind is None:
        known = ", ".join(sorted([*BUILTIN_PLANNER_KINDS, *kinds])) or "none"
        raise SpecError(
            f"unknown planner kind {spec.kind!r}",
            errors=[{"field": "planner.kind", "message": f"not registered (known: {known})"}],
        )
    try:
        return kind, kind.settings_model.model_validate(spec.settings)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(["planner", "settings", *map(str, e["loc"])]), "message": e["msg"]}
            for e in exc.errors(include_url=False)
        ]
        raise SpecError("invalid planner settings", errors=errors) from None


def check_planner(spec: RunSpec, kinds: Mapping[str, PlannerKind]) -> None:
    """At start: a plug-in planner's kind is registered and its settings are valid."""
    if isinstance(spec.planner, PluginPlannerSpec):
        resolve(spec.planner, kinds)
