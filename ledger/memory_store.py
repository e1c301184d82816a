"""Long-term memory under a write policy (000 section 9).

A write needs *all* of: a whitelisted key, a value that passes schema and length checks, a
user confirmation of this run whose proposal hash matches exactly what is written, a subject
in scope, a valid ``memory:write`` grant, and a defined retention. Updates of one
(subject, key) are conditional on the version the writer saw; a conflict reports the current
value and the candidate and overwrites nothing. Reads filter by subject, expiry and
revocation and return structured fields, never instructions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select, text

from warrant.ledger.db import session_scope
from warrant.ledger.models import Confirmation, GrantRow, MemoryRecord, Run
from warrant.ledger.repo import append_events
from warrant.ledger.stage_loads import grant_views
from warrant.runner.canonical import proposal_hash
from warrant.runner.codes import ErrorCode
from warrant.runner.errors import MemoryNotFound, ToolRejected

__all__ = ["DEFAULT_MEMORY_KEYS", "MemoryConflict", "MemoryStore"]

#: Keys a deployment allows by default (``Stores(engine, memory_keys=...)`` sets others).
DEFAULT_MEMORY_KEYS = ("answer_language", "citation_style")
MAX_VALUE_CHARS = 40


class MemoryConflict(ToolRejected):
    """The record changed since the writer saw it: nothing was overwritten."""

    code: str = ErrorCode.MEMORY_VERSION_CONFLICT

    def __init__(self, *, current_value: str | None, current_version: int, candidate: str) -> None:
        super().__init__(f"memory changed: now v{current_version}")
        self.current_value = current_value
        self.current_version = current_version
        self.candidate = candidate

    @property
    def details(self) -> dict[str, Any] | None:
        return {
            "current_value": self.current_value,
            "current_version": self.current_version,
            "candidate": self.candidate,
        }


@dataclass(frozen=True)
class MemoryStore:
    engine: Engine
    allowed_keys: tuple[str, ...] = DEFAULT_MEMORY_KEYS
    retention: timedelta | None = timedelta(days=365)

    def write(
        self,
        *,
        subject: str,
        key: str,
        value: str,
        expected_version: int,
        run_id: str,
        idempotency_token: str,
        confirmation_id: str | None,
        tool: str,
        tool_version: str,
        arguments: dict[str, Any],
    ) -> int:
        """Write ``value`` under the write policy (module docstring); returns its version. The
        same ``idempotency_token`` again returns the version it wrote."""
        retention = self._retention_for(key, value)
        with session_scope(self.engine) as s:
            self._check_source(
                s,
                subject=subject,
                run_id=run_id,
                confirmation_id=confirmation_id,
                expected_hash=proposal_hash(tool, tool_version, arguments),
            )
            self._check_grant(s, run_id, f"memory:{subject}/{key}")
            # One writer per (subject, key) at a time; then the version condition decides.
            s.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": f"memory:{subject}/{key}"}
            )
            same = s.scalars(
                select(MemoryRecord.version).where(
                    MemoryRecord.idempotency_token == idempotency_token
                )
            ).first()
            if same is not None:
                return int(same)
            version = self._next_version(s, subject, key, expected_version, candidate=value)
            s.add(
                MemoryRecord(
                    subject=subject,
                    key=key,
                    value=value,
                    version=version,
                    source_kind="user-confirmation",
                    confirmation_id=confirmation_id,
                    created_by_run=run_id,
                    idempotency_token=idempotency_token,
                    expires_at=datetime.now(tz=UTC) + retention,
                )
            )
            return version

    def by_token(self, idempotency_token: str) -> dict[str, Any] | None:
        """The record the write under ``idempotency_token`` made (``key``, ``version``), or
        None if it never happened (records are keyed by the token: the reconciliation)."""
        with session_scope(self.engine) as s:
            row = s.execute(
                select(MemoryRecord.key, MemoryRecord.version).where(
                    MemoryRecord.idempotency_token == idempotency_token
                )
            ).first()
        return None if row is None else {"key": row.key, "version": int(row.version)}

    def _retention_for(self, key: str, value: str) -> timedelta:
        """The candidate's checks (whitelisted key, length); its retention, which must exist."""
        if key not in self.allowed_keys:
            raise ToolRejected("key not whitelisted", code="MEMORY_KEY_NOT_ALLOWED")
        if not value or len(value) > MAX_VALUE_CHARS:
            raise ToolRejected("value fails its length check", code="MEMORY_VALUE_TOO_LONG")
        if self.retention is None:
            raise ToolRejected("no retention defined", code="MEMORY_RETENTION_UNDEFINED")
        return self.retention

    @staticmethod
    def _check_source(
        s: Any, *, subject: str, run_id: str, confirmation_id: str | None, expected_hash: str
    ) -> None:
        """The run writes for its own subject, confirmed by the user for exactly this write."""
        run = s.get(Run, run_id)
        if run is None or run.subject != subject:
            raise ToolRejected("subject out of scope", code="MEMORY_SUBJECT_OUT_OF_SCOPE")
        confirmation = s.get(Confirmation, confirmation_id) if confirmation_id else None
        if (
            confirmation is None
            or not confirmation.approved
            or confirmation.run_id != run_id
            or confirmation.proposal_hash != expected_hash
        ):
            raise ToolRejected("no matching user confirmation", code="MEMORY_SOURCE_NOT_CONFIRMED")

    @staticmethod
    def _check_grant(s: Any, run_id: str, resource: str) -> None:
        """A ``memory:write`` grant of the run covers ``resource``."""
        grants = grant_views(s, run_id, GrantRow.capability == "memory:write")
        if not any(g.covers(resource) for g in grants):
            raise ToolRejected("no memory:write grant", code="MISSING_CAPABILITY")

    def _next_version(
        self, s: Any, subject: str, key: str, expected_version: int, *, candidate: str
    ) -> int:
        """The version to write, if the active record is still at ``expected_version`` (else
        :class:`MemoryConflict`, nothing overwritten)."""
        active = self._active(s, subject, key)
        current_version = active.version if active else 0
        if current_version != expected_version:
            raise MemoryConflict(
                current_value=active.value if active else None,
                current_version=current_version,
                candidate=candidate,
            )
        top = s.execute(
            select(func.coalesce(func.max(MemoryRecord.version), 0)).where(
                MemoryRecord.subject == subject, MemoryRecord.key == key
            )
        ).scalar_one()
        return int(top) + 1

    @staticmethod
    def _active(s: Any, subject: str, key: str) -> MemoryRecord | None:
        now = datetime.now(tz=UTC)
        return s.scalars(
            select(MemoryRecord)
            .where(
                MemoryRecord.subject == subject,
                MemoryRecord.key == key,
                MemoryRecord.revoked_at.is_(None),
                (MemoryRecord.expires_at.is_(None)) | (MemoryRecord.expires_at > now),
            )
            .order_by(MemoryRecord.version.desc())
            .limit(1)
        ).first()

    def preferences(self, subject: str, *, session: Any = None) -> dict[str, dict[str, Any]]:
        """Structured preferences of ``subject``: active records only, latest version
        (one query; pass ``session`` to reuse an open transaction)."""
        now = datetime.now(tz=UTC)
        q = (
            select(
                MemoryRecord.key, MemoryRecord.value, MemoryRecord.source_kind, MemoryRecord.version
            )
            .where(
                MemoryRecord.subject == subject,
                MemoryRecord.key.in_(self.allowed_keys),
                MemoryRecord.revoked_at.is_(None),
                (MemoryRecord.expires_at.is_(None)) | (MemoryRecord.expires_at > now),
            )
            .order_by(MemoryRecord.key, MemoryRecord.version.desc())
            .distinct(MemoryRecord.key)
        )
        if session is not None:
            rows = session.execute(q).all()
        else:
            with session_scope(self.engine) as s:
                rows = s.execute(q).all()
        return {k: {"value": v, "source": src, "version": ver} for k, v, src, ver in rows}

    def records(self, subject: str, *, include_inactive: bool = False) -> list[dict[str, Any]]:
        now = datetime.now(tz=UTC)
        with session_scope(self.engine) as s:
            rows = s.scalars(
                select(MemoryRecord)
                .where(MemoryRecord.subject == subject)
                .order_by(MemoryRecord.key, MemoryRecord.version)
            )
            out = []
            for r in rows:
                active = r.revoked_at is None and (r.expires_at is None or r.expires_at > now)
                if active or include_inactive:
                    out.append(
                        {
                            "id": r.id,
                            "subject": r.subject,
                            "key": r.key,
                            "value": r.value,
                            "version": r.version,
                            "source": r.source_kind,
                            "confirmation_id": r.confirmation_id,
                            "created_by_run": r.created_by_run,
                            "expires_at": r.expires_at.isoformat() if r.expires_at else None,
                            "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None,
                            "revoked_by": r.revoked_by,
                            "active": active,
                        }
                    )
            return out

    def revoke(self, record_id: int, *, by: str) -> dict[str, Any]:
        with session_scope(self.engine) as s:
            r = s.get(MemoryRecord, record_id, with_for_update=True)
            if r is None:
                raise MemoryNotFound(f"no memory record {record_id}")
            if r.revoked_at is None:
                r.revoked_at, r.revoked_by = datetime.now(tz=UTC), by
                _trace_revocation(s, r, by)
            return {
                "id": r.id,
                "key": r.key,
                "subject": r.subject,
                "revoked_at": r.revoked_at.isoformat(),
                "revoked_by": r.revoked_by,
            }


def _trace_revocation(s: Any, record: MemoryRecord, by: str) -> None:
    """A revocation is an operator action: traced on the run that wrote the record."""
    run = s.get(Run, record.created_by_run) if record.created_by_run else None
    if run is not None:
        revoked = {"record_id": record.id, "key": record.key, "by": by}
        append_events(s, run.id, [("memory.revoked", revoked)], step=run.step)
