"""Vouched sources: the items of untrusted observations, who wrote each (as the service reports
it, :class:`~warrant.tools.attribution.Attribution`), which of them the user named, and what a
reply to an item's author may not carry.

"Open the link Bob sent me", "pay the IBAN in my landlord's mail", "save the page at
https://…": the user points at one third party's item. Its values are what the user asked
for, not an attacker's, as long as the attacker is not that third party. An item is
**named** when the user's own words (the goal and a person's answers; never the spec's
settings, never a tool's output) contain:

* its author, if that is an address or a URL, exactly (compared lower-cased, never
  case-folded: ``straße`` is not ``strasse``), as a whole address or URL of those words;
* its author, if that is a handle (a workspace member), as a proper name: capitalised, and
  not the first word of a sentence ("the channel Dana asked for", not "Release the note");
* a word of 3+ letters of a name the service knows the author by (``Attribution.names``: a
  contact's name in the user's own address book), case-insensitively.

The user's own mails are never named (a forward quotes someone else).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.mentions import token
from warrant.tools.attribution import Attribution

__all__ = [
    "MAX_ITEMS",
    "MIN_DATA_CHARS",
    "MIN_NAME_CHARS",
    "Item",
    "carried",
    "data_tokens",
    "items_of",
    "named_as",
    "squeeze",
]

#: A name word or handle shorter than this ("Al", "HR") names nobody reliably.
MIN_NAME_CHARS = 3
#: Items read from one observation, at most (a longer list is attributed up to here; the
#: rest is still untrusted text).
MAX_ITEMS = 500
#: A data token of fewer letters and digits (a year, a 4-digit code) is too common to say
#: that a reply carries another item's data.
MIN_DATA_CHARS = 5
#: Data tokens read from the run's observations for one reply, at most.
MAX_DATA_TOKENS = 20_000

_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
# a token carrying data: letters, digits and separators, with at least one digit
_DATA = re.compile(r"[\w][\w.,/:+-]*\d[\w.,/:+-]*|\d[\w.,/:+-]*")
_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]}]+", re.IGNORECASE)
_ADDRESS = re.compile(r"[\w.%+-]+@[\w-]+(?:\.[\w-]+)+")
_SENTENCE_END = re.compile(r"(?:^|[.!?:;\n]\s*|[\"'(]\s*)$")


@dataclass(frozen=True)
class Item:
    """One attributed item of an untrusted observation."""

    item_id: str
    """``<observation_id>`` (the whole output), or ``<observation_id>.<items>[<i>]``."""
    observation_id: str
    author: str
    names: tuple[str, ...]
    text: str
    """Every string and number in the item, one per line."""


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
        items.append(Item(item_id, observation_id, author.strip(), names, text))
    return items


def named_as(item: Item, user: str, *, own: str = "") -> str | None:
    """The words by which the user (``user``: their own words, as typed) named the item's
    author, or None. ``own``: the user's own address (their mails are never named)."""
    author = item.author.strip()
    if own and author.lower() == own.strip().lower():
        return None
    if "@" in author or "://" in author:
        wanted = author.lower().rstrip("/")
        if wanted in _addresses(user):
            return author
    elif len(author) >= MIN_NAME_CHARS and (said := _proper_name(author, user)) is not None:
        return said
    folded = user.casefold()
    for name in item.names:
        for word in _WORD.findall(name):
            if len(word) >= MIN_NAME_CHARS and token(word).search(folded):
                return word
    return None


def data_tokens(text: str) -> Iterator[str]:
    """Tokens in free text that carry data (a reference, an amount, an account number): at
    least one digit and four characters, trailing punctuation dropped."""
    for match in _DATA.finditer(text):
        found = match.group(0).rstrip(".,:;/-+")
        if len(found) >= 4:
            yield found


def squeeze(text: str) -> str:
    """Only the letters and digits, compatibility-normalised and lower-cased: what is left of
    a value however it is spaced, split, glued or written (``Q 3 R E V-4213000``, fullwidth
    digits and zero-width spaces all squeeze to ``q3rev4213000``)."""
    normal = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in normal if ch.isalnum()).lower()


def carried(
    payload: list[tuple[str, str]], *, sources: list[tuple[str, str]], exempt: str
) -> tuple[str, str] | None:
    """``(argument path, source id)`` of the first data token a source said, that ``exempt``
    (the user's words and the replied item) does not, and that a payload leaf (squeezed)
    contains; None when the payload carries none."""
    allowed = squeeze(exempt)
    seen: set[str] = set()
    for source_id, text in sources:
        for found in data_tokens(text):
            data = squeeze(found)
            if len(data) < MIN_DATA_CHARS or data in seen or data in allowed:
                continue
            seen.add(data)
            if len(seen) > MAX_DATA_TOKENS:
                return None
            for path, leaf in payload:
                if data in leaf:
                    return path, source_id
    return None


def _addresses(user: str) -> set[str]:
    urls = [m.group(0).rstrip(".,;:!?") for m in _URL.finditer(user)]
    rest = _URL.sub(" ", user)
    addresses = [m.group(0).rstrip(".") for m in _ADDRESS.finditer(rest)]
    return {a.lower().rstrip("/") for a in (*urls, *addresses)}


def _proper_name(handle: str, user: str) -> str | None:
    """The handle as the user wrote it, if they wrote it as a name (capitalised, not the first
    word of a sentence)."""
    pattern = re.compile(rf"(?<![\w@.\-#]){re.escape(handle)}(?![\w@\-])", re.IGNORECASE)
    for match in pattern.finditer(user):
        word = match.group(0)
        if word[:1].isupper() and not _SENTENCE_END.search(user[: match.start()]):
            return word
    return None


def _at(output: Mapping[str, Any], dotted: str) -> Any:
    value: Any = output
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value
