"""Vouched sources (docs/policy-gate.md, "Vouched sources and replies"): the items of untrusted
observations, who wrote each (as the service reports it: ``Attribution``), and which of them the
user named. :mod:`warrant.runner.provenance` reads them into a run's sources.

An item is named when the user's own words (the goal and a person's answers; never the spec's
settings, never a tool's output) contain its author, when that is an e-mail address or a URL,
exactly (lower-cased, never case-folded: ``straße`` is not ``strasse``; a prefix of a URL is not
the URL), or a word of 3+ letters of a name the service knows the author by
(``Attribution.names``), case-insensitively: a handle is named only this way (its owner picks it,
and "IBAN" or "Friday" could be one). The user's own mails are never named.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.mentions import emails, fold, split_urls, token, url_key
from warrant.runner.scopes import ResourceKind
from warrant.tools._contract import Attribution

__all__ = ["MAX_ITEMS", "MIN_NAME_CHARS", "Item", "items_of", "named_as"]


#: A name word shorter than this ("Al", "HR") names nobody reliably.
MIN_NAME_CHARS = 3
#: Items read from one observation, at most (a longer list is attributed up to here; the
#: rest is still untrusted text).
MAX_ITEMS = 500

_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
_NAMED_BY_ITSELF = frozenset({ResourceKind.EMAIL, ResourceKind.URL})


@dataclass(frozen=True)
class Item:
    """One attributed item of an untrusted observation."""

    item_id: str
    """``<observation_id>`` (the whole output), or ``<observation_id>.<items>[<i>]``."""
    author: str
    names: tuple[str, ...]
    text: str
    """Every string and number in the item (in its ``Attribution.vouches`` fields), one per
    line."""
    kind: ResourceKind = ResourceKind.IDENTIFIER
    """What the author is (``Attribution.kind``)."""
    place: str = ""
    """Where the service says it was posted (``Attribution.place``)."""


def items_of(
    observation_id: str,
    output: Any,
    attribution: Attribution,
    *,
    strings: Callable[[Any], Iterable[tuple[str, str]]],
) -> list[Item]:
    """The items of one observation's ``output`` (``strings(value)``: its leaf texts). An item
    without an author string is left out (its values stay merely untrusted)."""
    if not isinstance(output, Mapping):
        return []
    found: list[tuple[str, Any]] = []
    if attribution.items:
        listed = _at(output, attribution.items)
        if isinstance(listed, list | tuple):
            found = [
                (f"{observation_id}.{attribution.items}[{i}]", item)
                for i, item in enumerate(listed[:MAX_ITEMS])
            ]
    else:
        found = [(observation_id, output)]
    items = []
    for item_id, item in found:
        if not isinstance(item, Mapping):
            continue
        author = item.get(attribution.author) if attribution.author else ""
        place = item.get(attribution.place) if attribution.place else None
        place = place.strip() if isinstance(place, str) else ""
        if not isinstance(author, str) or not (
            author.strip() or (place and not attribution.author)
        ):
            continue
        names = tuple(
            n for n in (item.get(f) for f in attribution.names) if isinstance(n, str) and n
        )
        vouched = {f: item.get(f) for f in attribution.vouches} if attribution.vouches else item
        text = "\n".join(t for _, t in strings(vouched))
        items.append(Item(item_id, author.strip(), names, text, attribution.kind, place))
    return items


def named_as(item: Item, user: str, *, own: str = "") -> str | None:
    """The words by which the user (``user``: their own words, as typed) named the item's
    author as a source, or None. ``own``: the user's own address (their mails are never
    named). An address or URL is compared with :func:`~warrant.runner.mentions.url_key` /
    :func:`~warrant.runner.mentions.fold` (a look-alike is another author); a name written only
    where a recipient is ("send it to Bob") names a destination, not a source."""
    author = _address_key(item.author, item.kind)
    if own and author == fold(own.strip()):
        return None
    folded = fold(user)
    if item.author and item.kind in _NAMED_BY_ITSELF:
        written = [a for a in _addresses(user) if _address_key(a, item.kind) == author]
        if any(_as_source(folded, fold(a)) for a in written):
            return item.author
    for name in item.names if item.author else ():
        for word in _WORD.findall(name):
            if len(word) >= MIN_NAME_CHARS and _as_source(folded, fold(word)):
                return word
    # a place is named whole ("the 'Introductory meeting' event", "Alice's inbox")
    if len(item.place) >= MIN_NAME_CHARS and _as_source(folded, fold(item.place)):
        return item.place
    return None


#: A word that, just before a name, makes it a recipient ("send it to Bob", "invite Bob"),
#: unless a determiner comes before it ("the message Bob sent" names Bob as a source).
_RECIPIENT_WORDS = frozenset(
    {"to", "cc", "bcc", "invite", "tell", "notify", "pay", "forward", "email", "e-mail"}
    | {"mail", "message", "dm", "ask", "contact"}
)
_DETERMINERS = frozenset(
    ["the", "a", "an", "my", "his", "her", "their", "that", "this", "your", "our", "its"]
)
_PREVIOUS_WORDS = re.compile(r"([\w'-]+)?\W*?([\w'-]+)\W*$")


def _as_source(folded: str, word: str) -> bool:
    """Does ``word`` appear in the user's (folded) words anywhere but as a recipient?"""
    for match in token(word).finditer(folded):
        before = _PREVIOUS_WORDS.search(folded[max(0, match.start() - 40) : match.start()])
        if before is None or folded.startswith("'s", match.end()):
            return True
        determiner, previous = before.groups()
        if previous not in _RECIPIENT_WORDS or determiner in _DETERMINERS:
            return True
    return False


def _address_key(value: str, kind: ResourceKind) -> str:
    value = value.strip()
    return url_key(value) if kind is ResourceKind.URL else fold(value)


@functools.lru_cache(maxsize=64)
def _addresses(user: str) -> frozenset[str]:
    """The URLs and e-mail addresses in the user's words, as written."""
    urls, rest = split_urls(user)
    return frozenset((*urls, *emails(rest, unicode=True)))


def _at(output: Mapping[str, Any], dotted: str) -> Any:
    value: Any = output
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value
