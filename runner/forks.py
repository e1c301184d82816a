"""A fork's rules (pure): which step of which run may be forked, the spec a ``--spec-patch``
makes of the source's, and what the fork carries of the source's budgets and grant uses.

A fork (``warrant run fork RUN_ID --at STEP``) is a new live run whose ledger starts with
its source's observations before ``STEP`` and goes on from there through the normal
pipeline; the ledger side is :mod:`warrant.ledger.forks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from warrant.runner.errors import InvalidRequest

__all__ = ["FORK", "counted_grants", "fork_problem", "merge_patch"]

#: ``runs.kind`` of a fork (a producer's or a delegation's run is ``live``).
FORK = "fork"
#: The run kinds a fork may not start from: a replay executes nothing, it has nothing to go on.
UNFORKABLE = frozenset({"replay"})


def fork_problem(
    *, source_kind: str, last_step: int, at: int, unsettled: Sequence[int] = ()
) -> InvalidRequest | None:
    """``None`` if the source (of ``source_kind``, at step ``last_step``) may be forked at
    ``at``: a step from 1 to ``last_step + 1``, none before it with an effect still unsettled
    (``unsettled``: the steps whose command is issued or running, or whose effect is unknown:
    the fork would carry an effect nobody knows the fate of). Else the refusal to raise."""
    if source_kind in UNFORKABLE:
        return InvalidRequest(
            f"the run is a {source_kind}: it executed nothing to go on from; fork its source",
            code="FORK_SOURCE_INVALID",
        )
    if not 1 <= at <= last_step + 1:
        return InvalidRequest(
            f"--at {at} is out of range: the run is at step {last_step}, "
            f"a fork starts at a step from 1 to {last_step + 1}",
            code="FORK_STEP_INVALID",
        )
    before = sorted(s for s in set(unsettled) if s < at)
    if before:
        return InvalidRequest(
            f"the effect of step {before[0]} is not settled yet: fork at step {before[0]} "
            "or once it is",
            code="FORK_STEP_INVALID",
        )
    return None


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied as an RFC 7386 JSON merge patch: an object's members
    merged key by key (a ``null`` removes one), anything else replacing the target whole."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def counted_grants(
    grants: Sequence[Mapping[str, Any]], used: Mapping[str, int]
) -> list[dict[str, Any]]:
    """The fork's grants (its spec's, as ``runs_create`` records them) each with ``uses``: the
    uses the source made before the fork's step of its grants of the same capability (a fork
    gets no fresh uses by forking; a narrowed or widened scope counts the same uses)."""
    return [{**g, "uses": int(used.get(str(g.get("capability")), 0))} for g in grants]
