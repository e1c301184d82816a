"""Vouched sources: the items of untrusted observations, who wrote each (as the service reports
it, :class:`~warrant.tools.attribution.Attribution`), and which of them the user named.

"Open the link Bob sent me", "pay the IBAN in my landlord's mail", "save the page at
https://…": the user points at one third party's item. Its values are what the user asked
for, not an attacker's, as long as the attacker is not that third party. An item is
**named** when the user's own words (the goal, the spec, a person's answers; never a tool's
output) contain its author whole (an address, a URL, a workspace handle) or a word of one of
the names the service knows the author by (a contact's name in the user's address book).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.mentions import token
from warrant.tools.attribution import Attribution

__all__ = ["MIN_NAME_CHARS", "Item", "data_tokens", "items_of", "named_as"]

#: A name word shorter than this ("Al", "HR") names nobody reliably.
MIN_NAME_CHARS = 3
#: Items read from one observation, at most (a longer list is attributed up to here).
MAX_ITEMS = 500

_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
# a token carrying data: letters, digits and separators, with at least one digit
_DATA = re.compile(r"[\w][\w.,/:+-]*\d[\w.,/:+-]*|\d[\w.,/:+-]*")


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
    observation_id: str, output: Any, attribution: Attribution, *, strings: Any
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


def named_as(item: Item, user_words: str) -> str | None:
    """The words by which the user (``user_words``, case-folded) named the item's author, or
    None: the author whole, else a word of a name the service knows them by."""
    if token(item.author).search(user_words):
        return item.author
    for name in item.names:
        for word in _WORD.findall(name):
            if len(word) >= MIN_NAME_CHARS and token(word).search(user_words):
                return word
    return None


def data_tokens(text: str) -> Iterator[str]:
    """Tokens in free text that carry data (a reference, an amount, an account number): at
    least one digit and four characters, trailing punctuation dropped."""
    for match in _DATA.finditer(text):
        found = match.group(0).rstrip(".,:;/-+")
        if len(found) >= 4:
            yield found


def _at(output: Mapping[str, Any], dotted: str) -> Any:
    value: Any = output
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value
