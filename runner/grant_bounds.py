"""When an operator's grant is *wider* than a run's standing grant (issue 36 item 6).

A grant's bounds are what it still allows: a resource scope, a wall-clock expiry
(``expires_at``, the database's epoch seconds), a last step, the uses it has left and, for a
task-scoped grant, the sources its values must be mentioned in. A grant ``added`` is **within**
a standing grant when, on every bound, it allows no more:

==================  ============================================================================
bound               ``added`` is within ``standing`` when
==================  ============================================================================
resource scope      every value ``added`` covers, ``standing`` covers, read as every resource
                    kind the capability's tools declare (:func:`scope_within`)
``expires_at``      ``standing`` has none, or ``added``'s is not later
``expires_at_step`` ``standing`` has none, or ``added``'s is not later
uses                ``standing`` is unlimited, or ``added`` has a limit no larger than the uses
                    ``standing`` has *left*
task sources        ``standing`` is not task-scoped, or ``added`` is, with a subset of its
                    sources
==================  ============================================================================

``None`` is "no bound" everywhere, so a bounded grant is never wider than an unbounded one on
that bound. When unsure (a scope that does not parse, a glob inside a glob), the answer is
"wider": the operator must say so. :func:`widening` compares a new grant with every standing
grant of its capability: within any one of them, it only narrows; with none, it is a new
capability (granting one is what an operator's grant always did), not a widening.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from warrant.runner import scopes
from warrant.runner.scopes import ResourceKind
from warrant.runner.spec import GrantConstraints

__all__ = ["ALL_KINDS", "Bounds", "Widening", "scope_within", "widening", "wider_on"]

#: Every reading of a scope: each typed kind, and ``None`` for a tool with one untyped
#: ``resource`` (exact, ``*`` or a text prefix ending in ``*``).
ALL_KINDS: frozenset[ResourceKind | None] = frozenset({*ResourceKind, None})

_GLOB = frozenset("*?[")


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """What one grant still allows."""

    resource_scope: str = "*"
    expires_at: float | None = None
    """Epoch seconds (the database's clock); ``None``: no wall-clock expiry."""
    expires_at_step: int | None = None
    uses_left: int | None = None
    """``None``: unlimited."""
    destinations_from: frozenset[str] | None = None
    """A task-scoped grant's sources; ``None``: not task-scoped."""
    constraints: GrantConstraints | None = None
    """Its limits on argument values (``Grant.constraints``); ``None``: none."""

    def shown(self) -> dict[str, object]:
        """For the trace (``grant.widened``'s before and after)."""
        return {
            "resource_scope": self.resource_scope,
            "expires_at": self.expires_at,
            "expires_at_step": self.expires_at_step,
            "uses_left": self.uses_left,
            "destinations_from": sorted(self.destinations_from)
            if self.destinations_from is not None
            else None,
            **({"constraints": self.constraints.model_dump()} if self.constraints else {}),
        }


def _url_parts(canonical: str) -> tuple[str, str, str, str]:
    """``scheme://host:port/path`` (a canonical URL scope) as its four parts."""
    scheme, _, rest = canonical.partition("://")
    authority, slash, path = rest.partition("/")
    host, _, port = authority.rpartition(":")
    return scheme, host, port, slash + path


def _url_within(inner: str, outer: str) -> bool:
    i_scheme, i_host, i_port, i_path = _url_parts(inner)
    o_scheme, o_host, o_port, o_path = _url_parts(outer)
    if (i_scheme, i_port) != (o_scheme, o_port):
        return False
    host_ok = i_host == o_host or (o_host.startswith("*.") and i_host.endswith(o_host[1:]))
    return host_ok and scopes._below(o_path, i_path)


def _identifier_within(inner: str, outer: str) -> bool:
    if inner == outer:
        return True
    if not _GLOB & set(inner):
        return fnmatchcase(inner, outer)
    prefix = outer[:-1]
    return outer.endswith("*") and not _GLOB & set(prefix) and inner.startswith(prefix)


def _kind_within(kind: ResourceKind, inner: str, outer: str) -> bool:
    try:
        inner, outer = scopes.validate_scope(kind, inner), scopes.validate_scope(kind, outer)
    except scopes.InvalidScope:
        return False
    if outer == "*":
        return True
    if inner == "*":
        return False
    if kind is ResourceKind.PATH:
        return scopes._below(outer, inner)
    if kind is ResourceKind.URL:
        return _url_within(inner, outer)
    if kind is ResourceKind.EMAIL:
        return inner == outer or (
            outer.startswith("@") and not inner.startswith("@") and inner.endswith(outer)
        )
    return _identifier_within(inner, outer)


def scope_within(inner: str, outer: str, *, kinds: Collection[ResourceKind | None]) -> bool:
    """Does ``outer`` cover every value ``inner`` covers, however the capability's tools read a
    scope (``kinds``; empty: every reading)? ``*`` covers everything."""
    if outer == "*" or inner == outer:
        return True
    readings = kinds or ALL_KINDS
    return all(
        scopes.legacy_covers(outer, inner) if kind is None else _kind_within(kind, inner, outer)
        for kind in readings
    )


def _later(added: float | None, standing: float | None) -> bool:
    """Does ``added`` reach past ``standing`` (``None``: never ends)?"""
    if standing is None:
        return False
    return added is None or added > standing


def wider_on(
    added: Bounds, standing: Bounds, *, kinds: Collection[ResourceKind | None]
) -> tuple[str, ...]:
    """The bounds on which ``added`` allows more than ``standing`` (empty: within it)."""
    out: list[str] = []
    if not scope_within(added.resource_scope, standing.resource_scope, kinds=kinds):
        out.append("resource_scope")
    if _later(added.expires_at, standing.expires_at):
        out.append("expires_at")
    if _later(added.expires_at_step, standing.expires_at_step):
        out.append("expires_at_step")
    if _later(added.uses_left, standing.uses_left):
        out.append("max_uses")
    sources = standing.destinations_from
    if sources is not None and (
        added.destinations_from is None or not added.destinations_from <= sources
    ):
        out.append("destinations_from")
    kept = standing.constraints is None or (
        added.constraints is not None and added.constraints.within(standing.constraints)
    )
    if not kept:  # a grant without the standing one's argument limits allows more
        out.append("constraints")
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Widening:
    """An added grant within none of the standing grants of its capability."""

    closest: Bounds
    """The standing grant it exceeds on the fewest bounds."""
    wider_on: tuple[str, ...]


def widening(
    added: Bounds, standing: Sequence[Bounds], *, kinds: Collection[ResourceKind | None]
) -> Widening | None:
    """``None`` when ``added`` only narrows (it is within one of ``standing``) or there is no
    standing grant of its capability; else the closest standing grant and how it is wider."""
    best: Widening | None = None
    for grant in standing:
        dims = wider_on(added, grant, kinds=kinds)
        if not dims:
            return None
        if best is None or len(dims) < len(best.wider_on):
            best = Widening(closest=grant, wider_on=dims)
    return best
