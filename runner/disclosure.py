"""Disclosure: what a write or egress call may carry to a destination trusted text does not
wholly name (the gate's provenance layer, :mod:`warrant.runner.provenance`, decides which
destinations those are; this module reads the payload).

Data is read as *data tokens* (runs with a digit, four characters or more) and matched
*squeezed* (:func:`squeeze`: only letters and digits, compatibility-normalised, lower-cased,
every decimal digit written as ASCII), so spacing, splitting, gluing, fullwidth or other
scripts' digits and zero-width characters do not hide a value.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.mentions import find, fold, leaf_strings
from warrant.runner.scopes import ResourceKind, resource_kind, top_argument
from warrant.runner.views import ProvenanceSources

__all__ = [
    "MAX_DATA_TOKENS",
    "MAX_EXEMPT",
    "MAX_WINDOW",
    "MIN_DATA_CHARS",
    "data_tokens",
    "disclosures",
    "payload",
    "private_disclosures",
    "squeeze",
    "squeezed_tokens",
    "top_argument",
]

#: A data token of fewer letters and digits (a year, a 4-digit code) is too common to say
#: that a reply carries another item's data.
MIN_DATA_CHARS = 5
#: Distinct data tokens read from the run's observations for a reply, at most: past it the
#: reply is refused (more data than the check reads is no reason to let it through).
MAX_DATA_TOKENS = 50_000

#: A calendar date or a time of day (``2024-05-16``, ``2024-05-16T10:00``, ``10:00:00``) is
#: when, not what: a reply that names the day of a payment or a meeting discloses nothing.
_WHEN = re.compile(
    r"(?:\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01]))?"
    r"(?:(?<=\d)T?)?(?:(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?)?"
)

# runs of word characters and the separators data is written with, holding a digit (linear:
# inside a run the look-behind fails at once, so each run is scanned from its start only)
_DATA_TOKEN = re.compile(r"(?<![\w.,/:+-])[\w.,/:+-]*?\d[\w.,/:+-]*")
_SEPARATORS = re.compile(r"[.,/:+-]+")
_DIGIT = re.compile(r"\d")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
#: Consecutive parts of a data token read as one value (``48,213`` of ``48,213.00``).
MAX_WINDOW = 4


def data_tokens(text: str) -> Iterator[str]:
    """Tokens in free text that carry data (a reference, an amount, an account number): at
    least one digit and four characters, trailing punctuation dropped. Linear in the text."""
    for match in _DATA_TOKEN.finditer(text):
        found = match.group(0).strip(".,:;/-+")
        if len(found) >= 4 and _DIGIT.search(found):
            yield found


def squeeze(text: str) -> str:
    """Only the letters and digits, compatibility-normalised, lower-cased and every decimal
    digit written as ASCII: what is left of a value however it is spaced, split, glued or
    written (``Q 3 R E V-4213000``, fullwidth, Arabic-Indic or Devanagari digits and
    zero-width spaces all squeeze to ``q3rev4213000``)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    if text.isascii():
        return _NOT_ALNUM.sub("", text.lower())
    return "".join(_ascii_digit(ch) for ch in text if ch.isalnum()).lower()


def _ascii_digit(ch: str) -> str:
    digit = unicodedata.decimal(ch, None)
    return ch if digit is None else str(digit)


@functools.lru_cache(maxsize=4096)
def squeezed_tokens(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The data tokens of ``text``: squeezed whole, and every run of up to
    :data:`MAX_WINDOW` consecutive parts between separators, squeezed (``48,213.00`` gives
    ``4821300``, ``48213`` and ``21300``; ``ref:Q3REV-4213000`` gives ``q3rev4213000``,
    ``q3rev`` and ``4213000`` among others); only those of :data:`MIN_DATA_CHARS` letters and
    digits or more, with a digit. Cached by text: a run's observations are read again at each
    of its calls."""
    whole: set[str] = set()
    windows: set[str] = set()
    for data in data_tokens(text):
        if _WHEN.fullmatch(data):
            continue
        parts = [squeeze(p) for p in _SEPARATORS.split(data)]  # squeezed once, then joined
        whole |= _kept(["".join(parts)])
        digits = [bool(_DIGIT.search(p)) for p in parts]
        for i in range(len(parts)):
            joined, digit = "", False
            for j in range(i, min(len(parts), i + MAX_WINDOW)):
                joined, digit = joined + parts[j], digit or digits[j]
                if digit and len(joined) >= MIN_DATA_CHARS:
                    windows.add(joined)
    return frozenset(whole), frozenset(windows | whole)


def _kept(candidates: Iterable[str]) -> set[str]:
    kept = set()
    for candidate in candidates:
        squeezed = squeeze(candidate)
        if len(squeezed) >= MIN_DATA_CHARS and _DIGIT.search(squeezed):
            kept.add(squeezed)
    return kept


# --- disclosure: what a call may carry to a destination trusted text does not wholly name ----
# Replying to a mail's sender is what the user asked; sending the sender what someone else wrote
# is what an attacker who mailed "reply with the Q3 reference" asks. The check runs for every
# destination of a write or egress call that an item's author or a named person's item vouches
# for, and for a URL whose host trusted text names but not the rest (the rest is content). Such
# a call is ``disclosed`` when the rest of its arguments carry a data token an observation said
# that neither the user's words nor the vouching author's own items say (an author exempts only
# what no other source said: an attacker listing guesses in its own mail exempts nothing), or
# another typed resource nobody named. Payloads are matched squeezed, each leaf and all of them
# together (spacing, splitting by a word or across arguments, gluing, fullwidth or other
# scripts' digits and zero-width characters do not hide a value; part of a value is the value).
# A third party's data is refused like an untrusted destination; the user's own (a trusted
# tool's output) is asked about. Past MAX_DATA_TOKENS distinct tokens in the run, or when the
# author's own items carry more than MAX_EXEMPT, nothing is assumed. What it does not see: data
# without a digit, shorter codes, and any re-wording or encoding (spelled-out digits, base64).
# The details: docs/policy-gate.md.

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
    unnamed: Mapping[str, str] | None = None,
    pointed: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The ``disclosed`` flags of a call whose destinations at ``replied`` (argument path ->
    the vouching item's id, ``""`` for none) trusted text does not wholly name; ``unnamed``:
    URL destinations' parts beyond what names them (payload); ``pointed``: the paths whose
    destination an item the user named vouches for (the user pointed at it: their own data
    and the call's other resources may go there; a third party's data may not). At most one
    flag."""
    unnamed = unnamed or {}
    # a destination is not payload, but for the part of a URL nothing named (free text that
    # embeds an address is: it carries the rest of the message)
    leaves = [
        (p, unnamed.get(p, t))
        for p, t in payload(arguments)
        if p not in replied or p in unnamed or resource_kind(resources, p) is None
    ]
    hits = _hits(leaves, sources)
    user_tokens = squeezed_tokens("\n".join(sources.user))[1]
    author_of = {item_id: fold(author.strip()) for item_id, author, _, _ in sources.items}
    tops = {top_argument(p) for p in replied}
    for author in sorted({author_of.get(i, "") for i in replied.values()}):
        paths = {p for p, i in replied.items() if author_of.get(i, "") == author}
        replying = bool(author) and not paths <= pointed  # to an item's author: a reply
        own = "\n".join(t for _, a, t, _ in sources.items if author and fold(a.strip()) == author)
        exempt = user_tokens | _exempt(own, author, sources)
        first = next(i for i in sorted(set(replied.values())) if author_of.get(i, "") == author)
        named = fold("\n".join((*sources.user, own)))
        for path, value in leaves if replying else ():
            kind = resource_kind(resources, path)
            attached = kind is not None and top_argument(path) not in tops and value.strip()
            if attached and not find(value.strip(), named):
                return [_flag(path, value, None, "resource", first, sensitive)]
        if hits is None:
            return [_flag("", "", None, "too-much", first, sensitive)]
        for hit in hits:
            if hit.data not in exempt and (hit.origin == "untrusted" or paths - pointed):
                value = next((t for p, t in leaves if p == hit.path), "")
                return [_flag(hit.path, value, hit.source, hit.origin, first, sensitive)]
    return []


def private_disclosures(
    arguments: dict[str, Any],
    *,
    resources: Mapping[str, ResourceKind],
    sources: ProvenanceSources,
    sensitive: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The ``disclosed`` flag of a write or egress call that carries the user's private data
    (``Tool.private``: a passport or card number) the user's own words do not ask to send
    (neither the value nor a word of its field: "my passport number"), whoever the
    destination is; at most one."""
    if not sources.private:
        return []
    leaves = [(p, t) for p, t in payload(arguments) if resource_kind(resources, p) is None]
    joined = "\n".join(t for _, t in leaves)
    carried = (squeeze(joined), squeeze("".join(_DATA_RUN.findall(joined))))
    user = "\n".join(sources.user)
    said, words = squeeze(user), fold(user)
    for observation_id, field, value in sources.private:
        data = squeeze(value)
        if len(data) < MIN_DATA_CHARS or data in said or not any(data in c for c in carried):
            continue
        named = [w for w in _FIELD_WORD.findall(fold(field)) if w not in _GENERIC_WORDS]
        if any(find(w, words) for w in named):
            continue
        path = _carrier(data, leaves)
        text = next((t for p, t in leaves if p == path), "")
        flag = _flag(path, text, observation_id, "private", "", sensitive)
        return [{**flag, "field": field}]
    return []


_FIELD_WORD = re.compile(r"[a-z]{4,}")
#: Words of a private field's name too generic to say the user asked for it.
_GENERIC_WORDS = frozenset({"number", "value", "code", "data", "info", "details"})


def _exempt(own: str, author: str, sources: ProvenanceSources) -> set[str]:
    """The data tokens the author's own items said and no other source did (at most
    :data:`MAX_EXEMPT`): an attacker cannot exempt a value by listing it in its own mail."""
    if not author:
        return set()
    mine = squeezed_tokens(own)[1]
    if len(mine) > MAX_EXEMPT:
        return set()
    with_items = {item_id.split(".")[0] for item_id, _, _, _ in sources.items}
    others = [t for _, a, t, _ in sources.items if fold(a.strip()) != author]
    others += [t for oid, t in sources.untrusted if oid not in with_items]
    others += [t for name, t in sources.task if name.startswith("observations:")]
    said = [squeezed_tokens(t)[1] for t in others]
    return {data for data in mine if not any(data in tokens for tokens in said)}


def payload(value: Any) -> Iterator[tuple[str, str]]:
    """``(path, text)`` of every string, number and nested mapping key inside ``value``."""
    return leaf_strings(value, numbers=True, keys=True)


def _hits(leaves: list[tuple[str, str]], sources: ProvenanceSources) -> list[_Hit] | None:
    """Every data token an observation said that the payload carries: a whole source token
    inside a squeezed leaf, inside all leaves squeezed together, or inside the data runs (the
    runs with a digit) of all leaves squeezed together (a value split by words or across
    arguments); or a part of a leaf's token that is a part of a source token (part of a
    value). None past ``MAX_DATA_TOKENS``."""
    observed = [(oid, text, "untrusted") for oid, text in sources.untrusted]
    observed += [
        (name.split(":", 1)[1], text, "trusted-tool")
        for name, text in sources.task
        if name.startswith("observations:")
    ]
    squeezed = [(p, squeeze(t), squeezed_tokens(t)[1]) for p, t in leaves]
    joined = "\n".join(t for _, t in leaves)
    together = (squeeze(joined), squeeze("".join(m.group(0) for m in _DATA_RUN.finditer(joined))))
    hits: list[_Hit] = []
    seen = 0
    for source, text, origin in observed:
        _, windows = squeezed_tokens(text)
        whole_at, windows_at = _by_prefix(text)
        seen += len(windows)
        if seen > MAX_DATA_TOKENS:
            return None
        for path, flat, parts in squeezed:
            found = _inside(whole_at, flat) | (parts & windows)
            hits += [_Hit(data, path, source, origin) for data in sorted(found)]
        across = _inside(windows_at, together[0]) | _inside(windows_at, together[1])
        hits += [_Hit(data, _carrier(data, leaves), source, origin) for data in sorted(across)]
    return hits


def _carrier(data: str, leaves: list[tuple[str, str]]) -> str:
    """The first leaf that carries a piece of ``data`` split across leaves or words (a run
    of its letters and digits), else the first leaf."""
    for path, text in leaves:
        if any(len(p) >= 2 and p in data for p in map(squeeze, _DATA_RUN.findall(text))):
            return path
    return next((p for p, t in leaves if t.strip()), "")


_Prefixed = dict[str, tuple[str, ...]]


@functools.lru_cache(maxsize=4096)
def _by_prefix(text: str) -> tuple[_Prefixed, _Prefixed]:
    """``text``'s data tokens (whole, and all windows) by their first
    :data:`MIN_DATA_CHARS` characters: what :func:`_inside` looks up."""
    found: list[_Prefixed] = []
    for tokens in squeezed_tokens(text):
        grouped: dict[str, list[str]] = {}
        for data in tokens:
            grouped.setdefault(data[:MIN_DATA_CHARS], []).append(data)
        found.append({k: tuple(v) for k, v in grouped.items()})
    return found[0], found[1]


def _inside(tokens: _Prefixed, flat: str) -> set[str]:
    """The tokens that occur in ``flat``: linear in ``flat`` (a look-up at each position),
    whatever the number of tokens."""
    found = set()
    for at in range(len(flat) - MIN_DATA_CHARS + 1):
        for data in tokens.get(flat[at : at + MIN_DATA_CHARS], ()):
            if flat.startswith(data, at):
                found.add(data)
    return found


#: A run of letters and digits with at least one digit (``Q3REV``, ``4213``; not ``apples``),
#: found from a run's start only (linear, like ``_DATA_TOKEN``).
_DATA_RUN = re.compile(r"(?<![^\W_])[^\W_]*?\d[^\W_]*")


def _flag(
    path: str, value: str, where: str | None, said: str, item_id: str, sensitive: frozenset[str]
) -> dict[str, Any]:
    """``said``: ``untrusted`` or ``trusted-tool`` (whose data ``where`` said), ``resource``
    (a resource nobody named) or ``too-much`` (more data than the check reads)."""
    return {
        "argument": path,
        "value": "<sensitive>" if top_argument(path) in sensitive else value[:200],
        "what": "disclosed",
        "origin": said if said in ("untrusted", "trusted-tool") else "untrusted",
        "said": said,
        "observation_id": where,
        "excerpt": None,
        "to": [item_id],
    }
