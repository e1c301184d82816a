"""Idempotent run starts: what a run row records of its start (the producer's idempotency
key, the hash of the validated spec, who started it) and the run an earlier start with the
same key recorded. Used by :meth:`warrant.runner.client.runs.RunsClient.start_run`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from warrant.ledger.db import retry_once_on_disconnect
from warrant.ledger.runs_create import run_for_idempotency_key
from warrant.ledger.stage_loads import autocommit
from warrant.runner.canonical import canonical_json, sha256_hex
from warrant.runner.errors import InvalidRequest, StateConflict
from warrant.runner.spec import RunSpec

__all__ = ["MAX_KEY_CHARS", "origin", "run_for_key", "spec_hash"]

#: The longest idempotency key (the column's width).
MAX_KEY_CHARS = 200


def spec_hash(spec: RunSpec) -> str:
    """sha256 of the canonical JSON of the validated, normalised spec, fields at their
    default left out: a release that adds a defaulted field does not change the hash of an
    unchanged spec (a start retried across the upgrade is still the same start)."""
    return sha256_hex(canonical_json(spec.model_dump(mode="json", exclude_defaults=True)))


def origin(
    spec: RunSpec, *, idempotency_key: str | None, started_by: str | None
) -> dict[str, str | None]:
    """The run row's ``idempotency_key`` (checked: :class:`InvalidRequest`
    ``IDEMPOTENCY_KEY_INVALID``), ``spec_hash`` and ``started_by``."""
    if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY_CHARS:
        raise InvalidRequest(
            f"an idempotency key has 1 to {MAX_KEY_CHARS} characters",
            code="IDEMPOTENCY_KEY_INVALID",
        )
    return {
        "idempotency_key": idempotency_key,
        "spec_hash": spec_hash(spec),
        "started_by": started_by,
    }


@retry_once_on_disconnect
def run_for_key(engine: Engine, start: dict[str, Any]) -> str | None:
    """The run recorded with ``start``'s idempotency key (``None`` if there is none yet);
    :class:`StateConflict` ``IDEMPOTENCY_KEY_REUSED`` if that run has another spec."""
    key = start["idempotency_key"]
    if key is None:
        return None
    with autocommit(engine, held=False) as conn:
        found = run_for_idempotency_key(conn, key)
    if found is None:
        return None
    run_id, recorded_hash = found
    if recorded_hash != start["spec_hash"]:
        raise StateConflict(
            f"idempotency key {key!r} was used for run {run_id} with another spec",
            code="IDEMPOTENCY_KEY_REUSED",
        )
    return run_id
