"""Does a text mention a value? The matching rules shared by provenance
(:mod:`warrant.runner.provenance`: does trusted text supply a destination?) and task-scoped
grants (:mod:`warrant.runner.grants`: does the goal, or a named trusted observation, name it?).

Values match as whole tokens ("13" is not in "2013"), with only ASCII letters' case folded
(:func:`fold`: a look-alike written with KELVIN SIGN or a Cyrillic letter is another value).
What of a destination must be mentioned: a URL's host; a path, or else its folder (a report
next to the one the goal names); an address or an identifier whole. Links are found with or
without a scheme (``www.example.com/x``, ``example.com/x``).
"""

from __future__ import annotations

import functools
import posixpath
import re
import string
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from warrant.runner.scopes import ResourceKind

__all__ = [
    "FOLDER",
    "MAX_DEPTH",
    "SHORT_NUMBER",
    "Folder",
    "destination_candidates",
    "emails",
    "find",
    "fold",
    "leaf_strings",
    "mentioned",
    "split_urls",
    "token",
    "url_key",
]


#: Deepest argument nesting walked (the gate refuses deeper input before provenance).
MAX_DEPTH = 64
#: A URL in free text (trailing punctuation is dropped by :func:`split_urls`): with a scheme;
#: ``www.`` and a domain; or a domain whose last label is a common top-level domain, or that a
#: path follows (``report.pdf`` is a file name, ``example.com/x`` and ``evil.io`` are links).
_URL = re.compile(
    r"\bhttps?://[^\s<>\"'`)\]}]+"
    r"|(?<![\w.@/-])(?:www\.(?:[a-z0-9-]+\.)+[a-z]{2,24}"
    r"|(?:[a-z0-9-]+\.)+(?:[a-z]{2,24}(?=/)|(?:com|net|org|io|co|info|biz|me|app|dev|xyz|site"
    r"|online|top|ru|cn|uk|de|fr|us|eu|ly|to|cc|tk|ml|ga|gq|cf)\b))(?![\w@-])(?!\.\w)"
    r"(?:/[^\s<>\"'`)\]}]*)?",
    re.IGNORECASE,
)
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold(text: str) -> str:
    """``text`` as identifiers are compared: ASCII letters lower-cased and nothing else (no
    Unicode case folding, no compatibility mapping). KELVIN SIGN (U+212A) lower-cases to an
    ASCII ``k`` under ``str.lower`` and NFKC; here it stays itself, so an address written with
    it is not the ASCII address a person named, and a Cyrillic ``\\u0430`` is not ``a``."""
    return text.translate(_ASCII_LOWER)


def url_key(url: str) -> str:
    """A URL as it is compared: scheme and host folded (:func:`fold`), the rest exactly as
    written (``/Paste/Ab1`` is not ``/paste/ab1``), one trailing ``/`` dropped. ``http``,
    ``https`` and no scheme at all (``www.example.com/x``, as people write links) are one
    web: the key is ``//<host><rest>``; any other scheme is kept (``ftp://…``)."""
    url = url.strip()
    scheme, found, rest = url.partition("://")
    if not found:
        scheme, rest = "", url
    scheme = fold(scheme)
    host, slash, path = rest.partition("/")
    prefix = "//" if scheme in ("", "http", "https") else f"{scheme}://"
    return f"{prefix}{fold(host)}{slash}{path}".rstrip("/")


#: How a folder candidate is written (:class:`Folder`).
FOLDER = "/*"


class Folder(str):
    """A folder candidate :func:`destination_candidates` built (``<folder>/*``): matched only
    as the folder of a file the text names, never as a prefix of a deeper path. A value that
    merely ends in ``/*`` (a glob a planner proposed) is a plain string, matched literally."""

    __slots__ = ()


#: Before a token: not inside a word, a domain (``corp.example`` is not in
#: ``docs.corp.example``), an address or a name with dashes.
_BEFORE = r"(?<![\w.\-+@])"
#: After a token: no more word, dash or address, and no further domain label (``docs.corp``
#: is not in ``docs.corp.example``; a full stop ending a sentence is fine).
_AFTER = r"(?![\w\-@])(?!\.\w)"


@functools.lru_cache(maxsize=4096)
def token(candidate: str) -> re.Pattern[str]:
    """The candidate as a whole token, folded (search a :func:`fold`-ed text)."""
    folded = fold(candidate)
    if isinstance(candidate, Folder):  # a file directly in that folder: "<folder>/<name>"
        folder = re.escape(folded[: -len(FOLDER)])
        return re.compile(rf"{_BEFORE}{folder}/[^/\s\"'<>]+(?![\w/])")
    return re.compile(rf"{_BEFORE}{re.escape(folded)}{_AFTER}")


def find(candidate: str, folded: str) -> re.Match[str] | None:
    """The first whole-token occurrence of ``candidate`` in ``folded`` (a :func:`fold`-ed
    text), or None. A plain substring test goes first: most candidates are in no text, and
    ``str.__contains__`` skips a long text far faster than the token pattern. A short number
    (:data:`SHORT_NUMBER` digits at most) is not mentioned by a date or a time: "June 13",
    "13 May", "Monday 13", "10:13" name no file or event ``13``."""
    needle = fold(candidate)
    if isinstance(candidate, Folder):
        needle = needle[: -len(FOLDER)] + "/"
    if needle not in folded:
        return None
    pattern = token(candidate)
    if not (needle.isdigit() and len(needle) <= SHORT_NUMBER):
        return pattern.search(folded)
    return next((m for m in pattern.finditer(folded) if not _in_a_date(folded, m)), None)


#: Digits of a number a date or a time may hold (a day, a month, an hour, a year).
SHORT_NUMBER = 4
_MONTHS_AND_DAYS = frozenset(
    {"january", "february", "march", "april", "may", "june", "july", "august", "september"}
    | {"october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug"}
    | {"sep", "sept", "oct", "nov", "dec", "monday", "tuesday", "wednesday", "thursday"}
    | {"friday", "saturday", "sunday", "mon", "tue", "wed", "thu", "fri", "sat", "sun"}
)
_WORD_BEFORE = re.compile(r"([a-z]+)\W{0,3}$")
_WORD_AFTER = re.compile(r"^\W{0,3}(?:of\s+)?([a-z]+)")


def _in_a_date(folded: str, match: re.Match[str]) -> bool:
    """Is the number at ``match`` part of a date or a time (a month or weekday next to it, a
    ``:`` on either side)?"""
    before, after = folded[max(0, match.start() - 16) : match.start()], folded[match.end() :]
    if before.endswith(":") or after.startswith(":"):
        return True
    words = (_WORD_BEFORE.search(before), _WORD_AFTER.match(after[:16]))
    return any(w is not None and w.group(1) in _MONTHS_AND_DAYS for w in words)


def destination_candidates(
    value: str, kind: ResourceKind | None, found: Callable[[str], bool]
) -> list[str]:
    """What must be mentioned of a destination (``found``: is this text mentioned?): a URL's
    host; a path, or else its folder (the normalised path's parent; never for a glob, which
    names many files); anything else whole."""
    value = value.strip()
    if not value:
        return []
    if kind is ResourceKind.URL:
        try:
            host = urlsplit(value if "://" in value else f"http://{value}").hostname
        except ValueError:
            host = None
        return [host or value]
    if kind is ResourceKind.PATH:
        folder = posixpath.dirname(posixpath.normpath(value))
        glob = any(ch in posixpath.basename(value) for ch in "*?[")  # many files, not one
        if not found(value) and folder not in ("", "/", ".") and not glob:
            return [Folder(folder + FOLDER)]
    return [value]


_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_DOMAIN = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_DOMAIN_UNICODE = re.compile(r"[\w-]+(?:\.[\w-]+)+")


def emails(text: str, *, unicode: bool = False) -> list[str]:
    """The e-mail addresses in ``text``, in order, linear in its length (found from each
    ``@``: a regular expression scanning for the local part first is quadratic on a long run
    without one). ``unicode``: letters beyond ASCII in both parts (an address as a person
    typed it)."""
    found = []
    domain = _DOMAIN_UNICODE if unicode else _DOMAIN
    end = 0
    for at in (i for i, ch in enumerate(text) if ch == "@"):
        if at < end:
            continue
        start = at
        while start > end and _local(text[start - 1], unicode=unicode):
            start -= 1
        match = domain.match(text, at + 1)
        if start == at or match is None:
            continue
        found.append(text[start : match.end()].rstrip("."))
        end = match.end()
    return found


def _local(ch: str, *, unicode: bool) -> bool:
    return ch in _LOCAL or (unicode and ch.isalnum())


def mentioned(value: str, kind: ResourceKind | None, folded: str) -> bool:
    """Does ``folded`` (a :func:`fold`-ed text) mention the destination ``value``?"""

    def found(candidate: str) -> bool:
        return find(candidate, folded) is not None

    candidates = destination_candidates(value, kind, found)
    return bool(candidates) and all(found(c) for c in candidates)


def leaf_strings(
    value: Any, path: str = "", depth: int = 0, *, numbers: bool = False, keys: bool = False
) -> Iterator[tuple[str, str]]:
    """``(path, text)`` for every string (and long number) inside ``value``. ``numbers``:
    every number, short ones too (a source's text: an id ``13`` a trusted listing returned
    vouches for ``delete_file("13")``). ``keys``: nested mapping keys too, at
    ``<path>#key`` (data a call may carry; an argument's own name is the schema's)."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        text = str(value)
        if numbers or len(text) >= 6:  # account and card numbers, not counts
            yield path, text
    elif isinstance(value, dict):
        for key, item in value.items():
            at = f"{path}.{key}" if path else str(key)
            if keys and path:
                yield f"{at}#key", str(key)
            yield from leaf_strings(item, at, depth + 1, numbers=numbers, keys=keys)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            at = f"{path}[{index}]"
            yield from leaf_strings(item, at, depth + 1, numbers=numbers, keys=keys)


def split_urls(text: str) -> tuple[list[str], str]:
    """The URLs in ``text`` (trailing punctuation dropped), and the text without them."""
    urls = [m.group(0).rstrip(".,;:!?") for m in _URL.finditer(text)]
    return urls, _URL.sub(" ", text)
