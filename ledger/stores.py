"""Stores the built-in tools write to (artifacts, long-term memory), backed by the ledger."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.dialects.postgresql import insert

from warrant.ledger.db import session_scope
from warrant.ledger.delegation import SubRuns
from warrant.ledger.memory_store import DEFAULT_MEMORY_KEYS, MemoryStore
from warrant.ledger.models import Artifact, OutcomeRow, Run

__all__ = ["ArtifactStore", "LedgerToolDeps"]


@dataclass(frozen=True)
class ArtifactStore:
    engine: Engine

    def put(
        self, *, run_id: str, path: str, content: str, sha256: str, idempotency_token: str
    ) -> str:
        """Store once per token; returns the sha256 stored under that token."""
        with session_scope(self.engine) as s:
            s.execute(
                insert(Artifact)
                .values(
                    run_id=run_id,
                    path=path,
                    content=content,
                    sha256=sha256,
                    idempotency_token=idempotency_token,
                )
                .on_conflict_do_nothing(index_elements=[Artifact.idempotency_token])
            )
            return s.execute(
                select(Artifact.sha256).where(Artifact.idempotency_token == idempotency_token)
            ).scalar_one()

    def by_token(self, idempotency_token: str) -> dict[str, str] | None:
        """What the write under ``idempotency_token`` stored (``path``, ``sha256``), or None
        if it never happened: the token is the store's key, so this is the reconciliation."""
        with session_scope(self.engine) as s:
            row = s.execute(
                select(Artifact.path, Artifact.sha256).where(
                    Artifact.idempotency_token == idempotency_token
                )
            ).first()
        return None if row is None else {"path": row.path, "sha256": row.sha256}

    def get_sha256(self, *, run_id: str, path: str) -> str | None:
        with session_scope(self.engine) as s:
            return s.execute(
                select(Artifact.sha256)
                .where(Artifact.run_id == run_id, Artifact.path == path)
                .order_by(Artifact.id.desc())
                .limit(1)
            ).scalar_one_or_none()


class LedgerToolDeps:
    """The ``deps`` the built-in tools get through :class:`~warrant.tools._contract.ToolContext`
    (and plug-in tools that bring no deps of their own, unless ``WARRANT_TOOL_DEPS`` is set)."""

    def __init__(
        self,
        engine: Engine,
        *,
        memory_keys: tuple[str, ...] = DEFAULT_MEMORY_KEYS,
        runs: SubRuns | None = None,
    ) -> None:
        self.engine = engine
        self.artifacts = ArtifactStore(engine)
        self.memory = MemoryStore(engine, allowed_keys=memory_keys)
        self.runs = runs or SubRuns(engine)
        """Sub-runs (the ``delegate`` tool): start, settle, cancel."""

    def item_reports(self, command_id: str) -> list[Any]:
        """What the command's earlier attempts (and reconciliations) recorded: each outcome's
        output, oldest first (a batch tool's ``items``: ``warrant.tools._batches``)."""
        with self.engine.connect() as conn:
            q = select(OutcomeRow.output).where(OutcomeRow.command_id == command_id)
            return list(conn.execute(q.order_by(OutcomeRow.id)).scalars())

    def run_status(self, run_id: str) -> str | None:
        """The run's status, read from the ledger (backs the tools' cancellation flag)."""
        with self.engine.connect() as conn:
            return conn.execute(select(Run.status).where(Run.id == run_id)).scalar_one_or_none()
