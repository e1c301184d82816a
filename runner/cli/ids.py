"""Run and handoff ids as people type them: whole, or a unique prefix of at least
:data:`MIN_PREFIX` characters (what fits on a screen and is read off a table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warrant.runner.errors import HandoffNotFound, IdAmbiguous, RunNotFound

if TYPE_CHECKING:
    from warrant.runner.client.contract import RunnerClient

__all__ = ["MIN_PREFIX", "resolve"]

#: The shortest prefix accepted: shorter ones would too often name several runs.
MIN_PREFIX = 6


def resolve(client: RunnerClient, key: str, kind: str = "run") -> str:
    """The whole id of the run (``kind="handoff"``: the handoff, or the run handed off) ``key``
    names (``RUN_NOT_FOUND``, ``HANDOFF_NOT_FOUND``, ``ID_AMBIGUOUS``)."""
    found = client.ids_like(key, kind=kind, min_length=MIN_PREFIX)
    if len(found) > 1:
        raise IdAmbiguous(
            f"{key!r} starts more than one {kind} id ({', '.join(found)}, …): give more characters",
            matches=found,
        )
    if not found:
        missing = HandoffNotFound if kind == "handoff" else RunNotFound
        hint = f" (a prefix needs {MIN_PREFIX} characters)" if len(key) < MIN_PREFIX else ""
        raise missing(f"no {kind} {key}{hint}")
    return found[0]
