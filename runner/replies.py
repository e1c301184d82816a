"""Replies: what a call may carry to a destination that only an item's author vouches for.

Replying to a mail's sender is what the user asked; sending the sender what someone else
wrote is what an attacker who mailed "reply with the Q3 reference" asks. So a call with an
``author`` destination (:mod:`warrant.runner.provenance`) is ``disclosed`` when, for any
replied item, its other arguments carry:

* a data token (a reference, an amount, an account number: a digit and at least
  :data:`~warrant.runner.vouching.MIN_DATA_CHARS` letters and digits) that an observation of
  the run said, that neither the user's words nor the replied item say. Matched on letters and
  digits only, compatibility-normalised (:func:`~warrant.runner.vouching.squeeze`): spacing,
  splitting, gluing, fullwidth digits and zero-width characters do not hide it. Every string,
  number and mapping key of the arguments is read;
* any other typed resource (an attachment's path, a file id) that neither the user's words nor
  the replied item name.

What it does not see: data without a digit (a password made of words), shorter codes, and any
re-wording or encoding (spelled-out digits, base64). The reply's prose is the model's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from warrant.runner.mentions import token
from warrant.runner.scopes import ResourceKind
from warrant.runner.views import ProvenanceSources
from warrant.runner.vouching import carried, squeeze

__all__ = ["disclosures", "payload"]

#: Deepest argument nesting read (the gate refuses deeper input before this layer).
MAX_DEPTH = 64


def disclosures(
    arguments: dict[str, Any],
    *,
    replied: Mapping[str, str],
    resources: Mapping[str, ResourceKind],
    sources: ProvenanceSources,
    sensitive: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The ``disclosed`` flags of a call whose destinations at ``replied`` (argument path ->
    item id) only an item's author vouches for; at most one."""
    # the replied destinations' own arguments are not payload (free text that embeds the
    # address is: it carries the rest of the message)
    tops = {_top(path) for path in replied if _top(path) in resources}
    carrying = [(p, squeeze(t)) for p, t in payload(arguments) if _top(p) not in tops]
    others = [
        *sources.untrusted,
        *((name, text) for name, text in sources.task if name.startswith("observations:")),
    ]
    user = "\n".join(sources.user)
    texts = {item_id: text for item_id, _, text, _ in sources.items}
    for item_id in sorted(set(replied.values())):
        exempt = f"{user}\n{texts.get(item_id, '')}"
        folded = exempt.casefold()
        for path, value in _resources(arguments, resources, skip=tops):
            if not token(value).search(folded):
                return [_flag(path, value, None, item_id, sensitive)]
        found = carried(carrying, sources=others, exempt=exempt)
        if found is not None:
            path, where = found
            return [_flag(path, _value_at(arguments, path), where, item_id, sensitive)]
    return []


def payload(value: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, str]]:
    """``(path, text)`` of every string, number and mapping key inside ``value``."""
    if depth > MAX_DEPTH or value is None or isinstance(value, bool):
        return
    if isinstance(value, str | int | float):
        yield path, str(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            at = f"{path}.{key}" if path else str(key)
            yield at, str(key)
            yield from payload(item, at, depth + 1)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from payload(item, f"{path}[{index}]", depth + 1)


def _resources(
    arguments: dict[str, Any], resources: Mapping[str, ResourceKind], *, skip: set[str]
) -> Iterator[tuple[str, str]]:
    for name in sorted(resources):
        if name not in skip and name in arguments:
            for path, text in payload(arguments[name], name):
                if text.strip():
                    yield path, text.strip()


def _top(path: str) -> str:
    return path.split(".")[0].split("[")[0]


def _value_at(arguments: dict[str, Any], path: str) -> str:
    return next((text for p, text in payload(arguments) if p == path), "")


def _flag(
    path: str, value: str, where: str | None, item_id: str, sensitive: frozenset[str]
) -> dict[str, Any]:
    """``where``: the observation that said the data (None: a resource nobody named)."""
    return {
        "argument": path,
        "value": "<sensitive>" if _top(path) in sensitive else value[:200],
        "what": "disclosed",
        "origin": "untrusted",
        "observation_id": where,
        "excerpt": None,
        "to": [item_id],
    }
