"""Provenance: which argument values of a call only untrusted content supplied.

A value (a string of at least :data:`MIN_CHARS` characters, or for a URL or e-mail resource
also its host or domain) that appears in an untrusted observation and nowhere in what the
user or a trusted tool said (the goal, the spec, trusted observations) is *flagged*. A write
or egress call with a flagged argument always waits for a person, who is shown the flag and
the untrusted excerpt it came from (a pre-approval cannot cover it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from warrant.runner.codes import ObservationSource, Rejection
from warrant.runner.scopes import ResourceKind
from warrant.runner.spec import ToolProposal
from warrant.runner.views import ProvenanceSources
from warrant.tools.contract import SideEffect, Tool

__all__ = [
    "EXCERPT_CHARS",
    "MIN_CHARS",
    "analyse",
    "leaf_strings",
    "provenance_of",
    "sources_from",
    "trace_details",
]

#: Shorter values ("1", "yes", "EUR") appear everywhere and prove nothing.
MIN_CHARS = 4
#: Characters of untrusted context shown on each side of a flagged value.
EXCERPT_CHARS = 60


def leaf_strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """``(path, text)`` for every string (and long number) inside ``value``."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        text = str(value)
        if len(text) >= 6:  # account and card numbers, not counts
            yield path, text
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from leaf_strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from leaf_strings(item, f"{path}[{index}]")


def provenance_of(
    tool: Tool[Any, Any],
    arguments: dict[str, Any],
    proposal: ToolProposal,
    sources: ProvenanceSources | None,
) -> dict[str, Any] | None:
    """The analysis for a write or egress call (``None`` for a read, or without sources)."""
    if sources is None or (tool.side_effect is SideEffect.READ and not tool.egress):
        return None
    return analyse(
        arguments,
        cites=list(proposal.source_observation_ids),
        sources=sources,
        resources=tool.resources,
        sensitive=tool.masked_fields,
    )


def trace_details(found: dict[str, Any]) -> dict[str, Any]:
    """The ``policy.provenance.checked`` event: argument paths only, never their values."""
    flagged = [f["argument"] for f in found["flagged"]]
    return {
        "cites": found["cites"],
        "cites_untrusted": found["cites_untrusted"],
        "flagged": flagged,
        "code": Rejection.UNTRUSTED_ARGUMENT.value if flagged else None,
    }


def analyse(
    arguments: dict[str, Any],
    *,
    cites: list[str],
    sources: ProvenanceSources,
    resources: Mapping[str, ResourceKind],
    sensitive: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """What the proposal cites and which of its argument values are flagged."""
    trusted = "\n".join(sources.trusted).casefold()
    untrusted = [(oid, text, text.casefold()) for oid, text in sources.untrusted]
    untrusted_ids = {oid for oid, _, _ in untrusted}
    flagged = []
    for path, value in leaf_strings(arguments):
        top = path.split(".")[0].split("[")[0]
        for candidate in _candidates(value, resources.get(top)):
            found = _only_untrusted(candidate, trusted, untrusted)
            if found is not None:
                oid, excerpt = found
                shown = "<sensitive>" if top in sensitive else value[:200]
                flagged.append(
                    {"argument": path, "value": shown, "observation_id": oid, "excerpt": excerpt}
                )
                break
    return {
        "cites": cites,
        "cites_untrusted": [c for c in cites if c in untrusted_ids],
        "flagged": flagged,
    }


def _candidates(value: str, kind: ResourceKind | None) -> list[str]:
    found = [value.strip()]
    if kind is ResourceKind.URL:
        try:
            host = urlsplit(value.strip()).hostname
        except ValueError:
            host = None
        if host:
            found.append(host)
    elif kind is ResourceKind.EMAIL and "@" in value:
        found.append(value.rsplit("@", 1)[1].strip())
    return [c for c in found if len(c) >= MIN_CHARS]


def _only_untrusted(
    candidate: str, trusted: str, untrusted: list[tuple[str, str, str]]
) -> tuple[str, str] | None:
    needle = candidate.casefold()
    if needle in trusted:
        return None
    for oid, text, folded in untrusted:
        at = folded.find(needle)
        if at >= 0:
            start = max(0, at - EXCERPT_CHARS)
            end = min(len(text), at + len(needle) + EXCERPT_CHARS)
            return oid, text[start:end]
    return None


def sources_from(
    goal: str, spec: dict[str, Any], observations: list[list[Any]]
) -> ProvenanceSources:
    """Trusted text: the goal, the spec without its planner section (a scripted planner's
    outputs are the model's, not the user's) and trusted observations; untrusted: the rest."""
    user_spec = {k: v for k, v in (spec or {}).items() if k != "planner"}
    trusted = [goal, *(text for _, text in leaf_strings(user_spec))]
    untrusted = []
    for observation_id, source, content in observations:
        text = "\n".join(t for _, t in leaf_strings(content))
        if source == ObservationSource.UNTRUSTED_CONTENT.value:
            untrusted.append((observation_id, text))
        else:
            trusted.append(text)
    return ProvenanceSources(trusted=tuple(trusted), untrusted=tuple(untrusted))
