"""A tool's precondition read (``Tool.precondition``): the state of the resource a person is
asked to approve a call on (a balance, an order's status, a file's version), read from the
tool's own service when the confirmation is requested and again just before the call runs.

What the read returns (a string or a mapping of JSON values) is reduced to a
:class:`Fingerprint`: a SHA-256 of its canonical JSON (what the approval is bound to) and a
short readable summary (what the approver is shown). Pure: the reads themselves are made by
the policy stage and the tool stage (``broker.tool.preconditions``).
"""

from __future__ import annotations

__layer__ = "pure core"

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warrant.runner.canonical import canonical_json, sha256_hex

__all__ = [
    "PRECONDITION_CHANGED",
    "PRECONDITION_UNREADABLE",
    "Fingerprint",
    "PreconditionContext",
    "fingerprint_of",
    "moved",
]

#: The state the approver saw moved before the call ran: not run, the run asks again.
PRECONDITION_CHANGED = "PRECONDITION_CHANGED"
#: The precondition could not be read (the read raised, or returned neither a string nor a
#: mapping of JSON values): the call does not run (fail closed).
PRECONDITION_UNREADABLE = "PRECONDITION_UNREADABLE"
#: The summary shown to the approver: at most this many entries of this many characters.
MAX_SUMMARY_FIELDS = 20
MAX_SUMMARY_CHARS = 200


@dataclass(frozen=True, kw_only=True)
class PreconditionContext:
    """What a precondition read may know: the run, its subject and the tool's dependencies
    (the same ``deps`` as ``ToolContext.deps``). The read has no effect and is quick."""

    run_id: str
    subject: str
    deps: Any


@dataclass(frozen=True)
class Fingerprint:
    """The state a precondition read saw: ``digest`` binds, ``summary`` is shown."""

    digest: str
    summary: dict[str, str]

    def shown(self) -> dict[str, Any]:
        """The form kept in a confirmation request (``precondition``)."""
        return {"fingerprint": self.digest, "summary": dict(self.summary)}


def _clean(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return "".join(ch for ch in text if ch.isprintable())[:MAX_SUMMARY_CHARS]


def fingerprint_of(value: Any) -> Fingerprint:
    """The fingerprint of what a precondition read returned: a string (``{"state": ...}``
    in the summary) or a mapping. Raises :class:`ValueError` for anything else or for values
    that are not JSON data (a read that answers nonsense is no read: fail closed)."""
    if isinstance(value, str):
        state: dict[str, Any] = {"state": value}
    elif isinstance(value, Mapping):
        state = {str(k): v for k, v in value.items()}
    else:
        raise ValueError(f"a precondition read returns a string or a mapping, not {type(value)}")
    try:
        digest = sha256_hex(canonical_json(state))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a precondition read returned values that are not JSON: {exc}") from None
    items = sorted(state.items())[:MAX_SUMMARY_FIELDS]
    return Fingerprint(digest, {_clean(k)[:64]: _clean(v) for k, v in items})


def moved(approved: str | None, now: Fingerprint) -> bool:
    """Has the state moved since the approval? An approval bound to no fingerprint (the read
    failed when it was requested, or it predates the precondition) counts as moved: the
    person must be shown a state before the call runs."""
    return approved is None or approved != now.digest
