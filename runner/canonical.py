"""Canonical JSON (RFC 8785) and the hashes built on it.

Fingerprints and proposal hashes are computed over canonical JSON of the *validated and
normalized* arguments, so key order, whitespace and number spelling never change identity,
and no timestamp or random id is ever part of it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


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


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


def arguments_hash(arguments: dict[str, Any]) -> str:
    return sha256_hex(canonical_json(arguments))


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
