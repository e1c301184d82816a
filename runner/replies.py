"""Replies: what a call may carry to a destination that only an item's author vouches for.

Replying to a mail's sender is what the user asked; sending the sender what someone else
wrote is what an attacker who mailed "reply with the Q3 reference" asks. So a call with an
``author`` destination (:mod:`warrant.runner.provenance`) is ``disclosed`` when, for any
replied author, the rest of its arguments (every string, number and mapping key, and the
replied argument's other elements) carry:

* a data token (a reference, an amount, an account number: a digit and at least
  :data:`~warrant.runner.vouching.MIN_DATA_CHARS` letters and digits) that an observation of
  the run said, and that neither the user's words nor that author's own items say. Matched on
  letters and digits only, compatibility-normalised (:func:`~warrant.runner.vouching.squeeze`):
  spacing, splitting, gluing, fullwidth digits and zero-width characters do not hide it, and
  part of a value (``48,213`` of ``48,213.00``) is the value;
* any other typed resource (an attachment's path) that neither the user's words nor that
  author's items name.

A third party's data is refused like an untrusted destination; the user's own (a trusted
tool's output: their calendar, their balance) is asked about (the tool's ``content`` rule),
so "reply proposing a slot from my calendar" reaches a person. Past
:data:`~warrant.runner.vouching.MAX_DATA_TOKENS` distinct tokens in the run, or when the
author's own items carry more than :data:`MAX_EXEMPT` (an attacker listing every number to
exempt them), nothing is assumed: the reply is refused, or nothing of the author's is exempt.

What it does not see: data without a digit (a password made of words), shorter codes, and any
re-wording or encoding (spelled-out digits, base64). The reply's prose is the model's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.mentions import leaf_strings, token
from warrant.runner.scopes import ResourceKind
from warrant.runner.views import ProvenanceSources
from warrant.runner.vouching import MAX_DATA_TOKENS, squeeze, squeezed_tokens

__all__ = ["MAX_EXEMPT", "disclosures", "payload"]

#: Data tokens an author's own items may exempt, at most.
MAX_EXEMPT = 2_000


@dataclass(frozen=True)
class _Hit:
    data: str
    path: str
    source: str
    origin: str


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
    # the replied destinations themselves are not payload (free text that embeds the
    # address is: it carries the rest of the message)
    leaves = [(p, t) for p, t in payload(arguments) if not (p in replied and _top(p) in resources)]
    hits = _hits(leaves, sources)
    user = "\n".join(sources.user)
    user_tokens = squeezed_tokens(user)[1]
    author_of = {item_id: author.strip().lower() for item_id, author, _ in sources.authors}
    tops = {_top(p) for p in replied}
    for author in sorted({author_of.get(i, "") for i in replied.values()}):
        own = "\n".join(t for i, a, t, _ in sources.items if a.strip().lower() == author)
        own_tokens = squeezed_tokens(own)[1]
        exempt = user_tokens | (own_tokens if len(own_tokens) <= MAX_EXEMPT else set())
        first = _first_item(replied, author_of, author)
        named = f"{user}\n{own}".casefold()
        for path, value in leaves:
            attached = _top(path) in resources and _top(path) not in tops and value.strip()
            if attached and not token(value.strip()).search(named):
                return [_flag(path, value, None, "resource", first, sensitive)]
        if hits is None:
            return [_flag("", "", None, "too-much", first, sensitive)]
        for hit in hits:
            if hit.data not in exempt:
                value = next((t for p, t in leaves if p == hit.path), "")
                return [_flag(hit.path, value, hit.source, hit.origin, first, sensitive)]
    return []


def payload(value: Any) -> Iterator[tuple[str, str]]:
    """``(path, text)`` of every string, number and nested mapping key inside ``value``."""
    return leaf_strings(value, numbers=True, keys=True)


def _hits(leaves: list[tuple[str, str]], sources: ProvenanceSources) -> list[_Hit] | None:
    """Every data token an observation said that a payload leaf carries: a whole source token
    inside a squeezed leaf (however spaced or glued), or a part of a leaf's token that is a
    part of a source token (part of a value). None past ``MAX_DATA_TOKENS``."""
    observed = [(oid, text, "untrusted") for oid, text in sources.untrusted]
    observed += [
        (name.split(":", 1)[1], text, "trusted-tool")
        for name, text in sources.task
        if name.startswith("observations:")
    ]
    squeezed = [(p, squeeze(t), squeezed_tokens(t)[1]) for p, t in leaves]
    hits: list[_Hit] = []
    seen = 0
    for source, text, origin in observed:
        whole, windows = squeezed_tokens(text)
        seen += len(windows)
        if seen > MAX_DATA_TOKENS:
            return None
        for path, flat, parts in squeezed:
            found = {w for w in whole if w in flat} | (parts & windows)
            hits += [_Hit(data, path, source, origin) for data in sorted(found)]
    return hits


def _first_item(replied: Mapping[str, str], author_of: Mapping[str, str], author: str) -> str:
    return next((i for i in sorted(set(replied.values())) if author_of.get(i) == author), "")


def _top(path: str) -> str:
    return path.split(".")[0].split("[")[0]


def _flag(
    path: str, value: str, where: str | None, said: str, item_id: str, sensitive: frozenset[str]
) -> dict[str, Any]:
    """``said``: ``untrusted`` or ``trusted-tool`` (whose data ``where`` said), ``resource``
    (a resource nobody named) or ``too-much`` (more data than the check reads)."""
    return {
        "argument": path,
        "value": "<sensitive>" if _top(path) in sensitive else value[:200],
        "what": "disclosed",
        "origin": said if said in ("untrusted", "trusted-tool") else "untrusted",
        "said": said,
        "observation_id": where,
        "excerpt": None,
        "to": [item_id],
    }
