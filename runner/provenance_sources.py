"""The text a run's argument values may come from, sorted by whose words it is: the user's,
a trusted tool's, an untrusted observation's (and, within those, the items whose author the
user named: :mod:`warrant.runner.vouching`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from warrant.runner.codes import ObservationSource
from warrant.runner.provenance import leaf_strings
from warrant.runner.views import ProvenanceSources
from warrant.runner.vouching import items_of, named_as
from warrant.tools._attribution import Attribution

__all__ = ["sources_from"]

#: Observations whose text is trusted: a person's answer, a tool that declares its output so.
_TRUSTED_SOURCES = frozenset({ObservationSource.USER.value, ObservationSource.TRUSTED_TOOL.value})


def sources_from(
    goal: str,
    spec: dict[str, Any],
    observations: list[list[Any]],
    *,
    attributions: Mapping[str, Attribution] | None = None,
) -> ProvenanceSources:
    """Trusted text: the goal, the spec without its planner section (a scripted planner's
    outputs are the model's, not the user's), a person's answers and trusted tools'
    observations; untrusted: every other tool's. Policy refusals are neither. ``task``: the
    same trusted text by the source name a task-scoped grant gives it. ``attributions``
    (tool name -> :class:`~warrant.tools._attribution.Attribution`): the items of those tools'
    untrusted outputs, each with the user's word naming its author if any (``named``), and
    the authors a reply may go to (``Attribution.replies``)."""
    user_spec = {k: v for k, v in (spec or {}).items() if k != "planner"}
    spec_text = [text for _, text in leaf_strings(user_spec)]
    trusted = [goal, *spec_text]
    user = [goal]  # the user's own words: never the spec's settings
    task = [("goal", goal), *(("spec", text) for text in spec_text)]
    untrusted = []
    attributed: list[tuple[str, Any, Attribution]] = []
    for observation_id, source, content in observations:
        if source == ObservationSource.POLICY.value:
            continue  # a refusal echoes the model's own proposal: it vouches for nothing
        # every number: a short id a tool returned is still what it said
        text = "\n".join(t for _, t in leaf_strings(content, numbers=True))
        if source in _TRUSTED_SOURCES:
            trusted.append(text)
            if source == ObservationSource.USER.value:
                user.append(text)
            if (name := _task_source(observation_id, source, content)) is not None:
                task.append((name, text))
        else:  # untrusted-content, and any source this version does not know
            untrusted.append((observation_id, text))
            found = _attribution(content, attributions or {})
            if found is not None:
                attributed.append((observation_id, content.get("output"), found))
    own = user_spec.get("subject")
    items, authors = _attributed(attributed, "\n".join(user), own if isinstance(own, str) else "")
    task += [("authors", author) for _, author, _ in authors]
    task += [("named", text) for _, _, text, named in items if named is not None]
    return ProvenanceSources(
        trusted=tuple(trusted),
        untrusted=tuple(untrusted),
        task=tuple(task),
        items=tuple(items),
        authors=tuple(authors),
        user=tuple(user),
    )


def _attributed(
    attributed: list[tuple[str, Any, Attribution]], user: str, own: str
) -> tuple[list[tuple[str, str, str, str | None]], list[tuple[str, str, str]]]:
    """The items of the attributed observations (each with the user's word naming its author,
    if any) and the authors a reply may go to."""
    items, authors = [], []
    for observation_id, output, attribution in attributed:
        for item in items_of(
            observation_id, output, attribution, strings=lambda v: leaf_strings(v, numbers=True)
        ):
            items.append((item.item_id, item.author, item.text, named_as(item, user, own=own)))
            if attribution.replies:
                authors.append((item.item_id, item.author, attribution.kind.value))
    return items, authors


def _attribution(content: Any, attributions: Mapping[str, Attribution]) -> Attribution | None:
    if not isinstance(content, dict) or content.get("status", "succeeded") != "succeeded":
        return None
    tool = content.get("tool")
    return attributions.get(tool) if isinstance(tool, str) else None


def _task_source(observation_id: str, source: str, content: Any) -> str | None:
    """The ``destinations_from`` name of a trusted observation: ``answers`` for a person's
    answer, ``observations:<tool>`` for a trusted tool's output (None for the goal's own)."""
    if source == ObservationSource.USER.value:
        return None if observation_id == "user-1" else "answers"
    tool = content.get("tool") if isinstance(content, dict) else None
    return f"observations:{tool}" if isinstance(tool, str) and tool else None
