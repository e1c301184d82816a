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
from warrant.tools.attribution import Attribution

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
    (tool name -> :class:`~warrant.tools.attribution.Attribution`): the items of those tools'
    untrusted outputs, each with the user's word naming its author if any (``named``)."""
    user_spec = {k: v for k, v in (spec or {}).items() if k != "planner"}
    spec_text = [text for _, text in leaf_strings(user_spec)]
    trusted = [goal, *spec_text]
    user = [goal, *spec_text]
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
    words = "\n".join(user).casefold()
    items = []
    for observation_id, output, attribution in attributed:
        for item in items_of(
            observation_id,
            output,
            attribution,
            strings=lambda v: leaf_strings(v, numbers=True),
        ):
            named = named_as(item, words)
            author = item.author if attribution.replies else ""
            items.append((item.item_id, author, item.text, named))
            if author:
                task.append(("authors", author))
            if named is not None:
                task.append(("named", item.text))
    return ProvenanceSources(
        trusted=tuple(trusted),
        untrusted=tuple(untrusted),
        task=tuple(task),
        items=tuple(items),
        user=tuple(user),
    )


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
