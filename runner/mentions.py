"""Does a text mention a value? The matching rules shared by provenance
(:mod:`warrant.runner.provenance`: does trusted text supply a destination?) and task-scoped
grants (:mod:`warrant.runner.grants`: does the goal, or a named trusted observation, name it?).

Values match as whole tokens, case-insensitively ("13" is not in "2013"). What of a
destination must be mentioned: a URL's host; a path, or else its folder (a report next to the
one the goal names); an address or an identifier whole.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from warrant.runner.scopes import ResourceKind

__all__ = ["destination_candidates", "mentioned", "token"]


def token(candidate: str) -> re.Pattern[str]:
    """The candidate as a whole token, case-folded (search a ``casefold()``-ed text)."""
    return re.compile(rf"(?<![\w]){re.escape(candidate.casefold())}(?![\w])")


def destination_candidates(
    value: str, kind: ResourceKind | None, found: Callable[[str], bool]
) -> list[str]:
    """What must be mentioned of a destination (``found``: is this text mentioned?): a URL's
    host; a path, or else its folder (the normalised path's parent); anything else whole."""
    value = value.strip()
    if not value:
        return []
    if kind is ResourceKind.URL:
        try:
            host = urlsplit(value).hostname
        except ValueError:
            host = None
        return [host or value]
    if kind is ResourceKind.PATH:
        folder = posixpath.dirname(posixpath.normpath(value))
        if not found(value) and folder not in ("", "/", "."):
            return [folder]
    return [value]


def mentioned(value: str, kind: ResourceKind | None, folded: str) -> bool:
    """Does ``folded`` (a ``casefold()``-ed text) mention the destination ``value``?"""

    def found(candidate: str) -> bool:
        return token(candidate).search(folded) is not None

    candidates = destination_candidates(value, kind, found)
    return bool(candidates) and all(found(c) for c in candidates)
