"""Vouched sources: the items of untrusted observations, who wrote each (as the service reports
it, :class:`~warrant.tools._attribution.Attribution`), which of them the user named, and the
data tokens a reply to an item's author may not carry.

"Open the link Bob sent me", "pay the IBAN in my landlord's mail", "save the page at
https://…": the user points at one third party's item. Its values are what the user asked
for, not an attacker's, as long as the attacker is not that third party. An item is
**named** when the user's own words (the goal and a person's answers; never the spec's
settings, never a tool's output) contain:

* its author, when that is an e-mail address or a URL (``Attribution.kind``), exactly:
  compared lower-cased, never case-folded (``straße`` is not ``strasse``), as a whole address
  or URL of those words (a prefix of a URL is not the URL);
* a word of 3+ letters of a name the service knows the author by (``Attribution.names``: the
  user's own address book), case-insensitively. A handle (a workspace member's) is named only
  this way: its owner picks it, and "IBAN" or "Friday" could be one.

The user's own mails are never named (a forward quotes someone else).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.mentions import emails, split_urls, token
from warrant.runner.scopes import ResourceKind
from warrant.tools._attribution import Attribution

__all__ = [
    "MAX_DATA_TOKENS",
    "MAX_ITEMS",
    "MAX_WINDOW",
    "MIN_DATA_CHARS",
    "MIN_NAME_CHARS",
    "Item",
    "data_tokens",
    "items_of",
    "named_as",
    "squeeze",
    "squeezed_tokens",
]

#: A name word shorter than this ("Al", "HR") names nobody reliably.
MIN_NAME_CHARS = 3
#: Items read from one observation, at most (a longer list is attributed up to here; the
#: rest is still untrusted text).
MAX_ITEMS = 500
#: A data token of fewer letters and digits (a year, a 4-digit code) is too common to say
#: that a reply carries another item's data.
MIN_DATA_CHARS = 5
#: Distinct data tokens read from the run's observations for a reply, at most: past it the
#: reply is refused (more data than the check reads is no reason to let it through).
MAX_DATA_TOKENS = 50_000

_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
# runs of word characters and the separators data is written with (linear: no backtracking)
_RUN = re.compile(r"[\w.,/:+-]+")
_SEPARATORS = re.compile(r"[.,/:+-]+")
#: Consecutive parts of a data token read as one value (``48,213`` of ``48,213.00``).
MAX_WINDOW = 4
_NAMED_BY_ITSELF = frozenset({ResourceKind.EMAIL, ResourceKind.URL})


@dataclass(frozen=True)
class Item:
    """One attributed item of an untrusted observation."""

    item_id: str
    """``<observation_id>`` (the whole output), or ``<observation_id>.<items>[<i>]``."""
    author: str
    names: tuple[str, ...]
    text: str
    """Every string and number in the item, one per line."""
    kind: ResourceKind = ResourceKind.IDENTIFIER
    """What the author is (``Attribution.kind``)."""


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
        author = item.get(attribution.author)
        if not isinstance(author, str) or not author.strip():
            continue
        names = tuple(
            n for n in (item.get(f) for f in attribution.names) if isinstance(n, str) and n
        )
        text = "\n".join(t for _, t in strings(item))
        items.append(Item(item_id, author.strip(), names, text, attribution.kind))
    return items


def named_as(item: Item, user: str, *, own: str = "") -> str | None:
    """The words by which the user (``user``: their own words, as typed) named the item's
    author, or None. ``own``: the user's own address (their mails are never named)."""
    author = item.author.strip().lower()
    if own and author == own.strip().lower():
        return None
    if item.kind in _NAMED_BY_ITSELF and author.rstrip("/") in _addresses(user):
        return item.author
    folded = user.casefold()
    for name in item.names:
        for word in _WORD.findall(name):
            if len(word) >= MIN_NAME_CHARS and token(word).search(folded):
                return word
    return None


def data_tokens(text: str) -> Iterator[str]:
    """Tokens in free text that carry data (a reference, an amount, an account number): at
    least one digit and four characters, trailing punctuation dropped. Linear in the text."""
    for match in _RUN.finditer(text):
        found = match.group(0).strip(".,:;/-+")
        if len(found) >= 4 and any(ch.isdigit() for ch in found):
            yield found


def squeeze(text: str) -> str:
    """Only the letters and digits, compatibility-normalised and lower-cased: what is left of
    a value however it is spaced, split, glued or written (``Q 3 R E V-4213000``, fullwidth
    digits and zero-width spaces all squeeze to ``q3rev4213000``)."""
    normal = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in normal if ch.isalnum()).lower()


def squeezed_tokens(text: str) -> tuple[set[str], set[str]]:
    """The data tokens of ``text``: squeezed whole, and every run of up to
    :data:`MAX_WINDOW` consecutive parts between separators, squeezed (``48,213.00`` gives
    ``4821300``, ``48213`` and ``21300``; ``ref:Q3REV-4213000`` gives ``q3rev4213000``,
    ``q3rev`` and ``4213000`` among others); only those of :data:`MIN_DATA_CHARS` letters and
    digits or more, with a digit."""
    whole: set[str] = set()
    windows: set[str] = set()
    for data in data_tokens(text):
        whole |= _kept([data])
        parts = [p for p in _SEPARATORS.split(data) if p]
        windows |= _kept(
            "".join(parts[i:j])
            for i in range(len(parts))
            for j in range(i + 1, min(len(parts), i + MAX_WINDOW) + 1)
        )
    return whole, windows | whole


def _kept(candidates: Iterable[str]) -> set[str]:
    kept = set()
    for candidate in candidates:
        squeezed = squeeze(candidate)
        if len(squeezed) >= MIN_DATA_CHARS and any(ch.isdigit() for ch in squeezed):
            kept.add(squeezed)
    return kept


def _addresses(user: str) -> set[str]:
    urls, rest = split_urls(user)
    return {a.lower().rstrip("/") for a in (*urls, *emails(rest, unicode=True))}


def _at(output: Mapping[str, Any], dotted: str) -> Any:
    value: Any = output
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value
