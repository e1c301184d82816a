"""Canonical JSON (RFC 8785) and the hashes built on it.

Fingerprints and proposal hashes are computed over canonical JSON of the *validated and
normalized* arguments, so key order, whitespace and number spelling never change identity,
and no timestamp or random id is ever part of it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

#: The deepest nesting of arrays and objects a proposal may have: the whole planner output
#: counts as one level, so its arguments nest at most 63 more. Deeper ones are refused before
#: anything walks them recursively (canonical JSON, the input schema, provenance), which
#: Python's recursion limit (about 1,000 frames) would otherwise turn into a crash.
MAX_JSON_DEPTH = 64


def json_depth(value: Any, *, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar: 0, ``[]``: 1, ``[[1]]``: 2),
    counted without recursion; it stops counting past ``limit`` (then returns ``limit + 1``),
    so any nesting, however deep (even a container inside itself), is measured and ends."""
    if not isinstance(value, _NESTING):
        return 0
    deepest = 1
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, _NESTING))
    return deepest


_NESTING = (dict, list, tuple)


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical bytes of a JSON-compatible value.

    Integers beyond RFC 8785's range (±(2**53 - 1), what an IEEE double holds exactly; e.g. a
    64-bit id) are written as their exact decimal digits; everything else is exactly RFC 8785.
    """
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        out: list[bytes] = []
        _dump(value, out)
        return b"".join(out)


def _dump(value: Any, out: list[bytes]) -> None:
    """RFC 8785, with any integer written as its digits (the slow path of ``canonical_json``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if -_SAFE <= value <= _SAFE:
            out.append(rfc8785.dumps(value))
        else:
            out.append(str(int(value)).encode())
    elif isinstance(value, (list, tuple)):
        out.append(b"[")
        for i, item in enumerate(value):
            if i:
                out.append(b",")
            _dump(item, out)
        out.append(b"]")
    elif isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise rfc8785.CanonicalizationError("object keys must be strings")
        # RFC 8785 3.2.3: members sorted by their keys' UTF-16 code units
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16be"))
        out.append(b"{")
        for i, (key, item) in enumerate(items):
            if i:
                out.append(b",")
            out.append(rfc8785.dumps(key))
            out.append(b":")
            _dump(item, out)
        out.append(b"}")
    else:  # strings, floats, booleans, null; anything else is refused as RFC 8785 refuses it
        out.append(rfc8785.dumps(value))


#: Largest integer RFC 8785 writes (``2**53 - 1``).
_SAFE = 2**53 - 1


def raw_fingerprint(raw: Any) -> str | None:
    """Loop detection's fingerprint of a proposal refused before its arguments were validated:
    sha256 of its tool, version and raw arguments, whatever they hold and however deep (``None``
    for an output that is no object). Canonical JSON when they have one; else the bytes of
    ``json.dumps([tool, version, arguments], sort_keys=True, default=str)``, written without
    recursion (:func:`stable_json`)."""
    if not isinstance(raw, dict):
        return None
    tool, version, arguments = raw.get("tool"), raw.get("tool_version"), raw.get("arguments")
    parts = {"tool": tool, "tool_version": version, "arguments": arguments}
    if json_depth(parts) <= MAX_JSON_DEPTH:  # any of the three may be the deep one
        try:
            return sha256_hex(canonical_json(parts))
        except Exception:  # NaN, a key that is no string, a value JSON lacks
            pass
    return sha256_hex(stable_json([tool, version, arguments]))


def raw_arguments_hash(raw: Any) -> str | None:
    """The hash of a proposal's arguments as received, before the gate validates them (the
    ``proposal.received`` event): ``content_hash`` of a tool call's ``arguments`` (a parallel
    step's: of its ``calls``) when they have a canonical form, else sha256 of
    :func:`stable_json`; ``None`` for an output that carries neither."""
    if not isinstance(raw, dict):
        return None
    key = "calls" if raw.get("kind") == "parallel" else "arguments"
    if key not in raw:
        return None
    value = raw[key]
    if json_depth(value) <= MAX_JSON_DEPTH:
        try:
            return sha256_hex(canonical_json(value))
        except Exception:  # NaN, a key that is no string, a value JSON lacks
            pass
    return sha256_hex(stable_json(value))


class _Text(str):
    """Output :func:`stable_json` has already written (a marker no input value can be)."""


class _Leave:
    """:func:`stable_json` leaves a container (it may appear again, on another path)."""

    def __init__(self, key: int) -> None:
        self.key = key


def stable_json(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, default=str)`` without recursion: the same text for
    any value ``json.dumps`` writes, at any depth; a container inside itself is written
    ``"<cycle>"`` instead of raising."""
    out: list[str] = []
    inside: set[int] = set()
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Leave):
            inside.discard(item.key)
        elif type(item) is _Text:
            out.append(item)
        elif isinstance(item, dict | list | tuple) and item:
            if id(item) in inside:
                out.append('"<cycle>"')
                continue
            inside.add(id(item))
            todo: list[Any] = []
            if isinstance(item, dict):
                for i, (key, child) in enumerate(_sorted_items(item)):
                    todo += [_Text((", " if i else "{") + _key(key) + ": "), child]
                todo.append(_Text("}"))
            else:
                for i, child in enumerate(item):
                    todo += [_Text(", " if i else "["), child]
                todo.append(_Text("]"))
            stack.append(_Leave(id(item)))
            stack.extend(reversed(todo))
        else:
            out.append(json.dumps(item, default=str))
    return "".join(out)


def _sorted_items(value: dict[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return sorted(value.items())
    except TypeError:  # keys of several types (no JSON object has them)
        return sorted(value.items(), key=lambda kv: repr(kv[0]))


def _key(key: Any) -> str:
    """An object key as ``json.dumps`` writes it (a number, ``true`` or ``null`` quoted)."""
    return json.dumps(key if isinstance(key, str) else json.dumps(key, default=str))


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


#: How much of a name the planner chose (a tool's, unknown to the registry) a trace event or
#: an observation echoes: a planner may send up to 200 characters of anything.
MAX_ECHOED_NAME = 64


def echoed_name(name: str) -> str:
    """A planner-chosen name as a trace event or an observation shows it: whole up to
    :data:`MAX_ECHOED_NAME` characters, else its first ones, an ellipsis and the first 12 hex
    digits of the whole name's SHA-256 (two long names stay told apart)."""
    if len(name) <= MAX_ECHOED_NAME:
        return name
    return f"{name[:MAX_ECHOED_NAME]}…{sha256_hex(name)[:12]}"


def proposal_hash(
    tool: str,
    tool_version: str,
    arguments: dict[str, Any],
    *,
    canonical_arguments: bytes | None = None,
) -> str:
    """What a confirmation is bound to: exactly the action that will execute.

    ``canonical_arguments``: ``canonical_json(arguments)``, when the caller already has it. An
    object's canonical form is its members in key order (``arguments`` < ``tool`` <
    ``tool_version``), each value in its own canonical form, so those bytes are reused as
    they are; the hash is the same either way."""
    if canonical_arguments is None:
        return sha256_hex(
            canonical_json({"tool": tool, "tool_version": tool_version, "arguments": arguments})
        )
    return sha256_hex(
        b'{"arguments":'
        + canonical_arguments
        + b',"tool":'
        + canonical_json(tool)
        + b',"tool_version":'
        + canonical_json(tool_version)
        + b"}"
    )


#: The loop-detection fingerprint is the proposal hash: same tool, version and arguments.
fingerprint = proposal_hash


def idempotency_token(run_id: str, proposal_id: str, tool_version: str, args_hash: str) -> str:
    """Stable across retries and redeliveries of one logical action."""
    return sha256_hex(canonical_json([run_id, proposal_id, tool_version, args_hash]))


def content_hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))


arguments_hash = content_hash
