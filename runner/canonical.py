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
    """RFC 8785 canonical bytes of a JSON-compatible value."""
    return rfc8785.dumps(value)


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
