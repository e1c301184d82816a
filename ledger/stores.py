"""Stores the built-in tools write to (artifacts, long-term memory), backed by the ledger."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.dialects.postgresql import insert

from warrant.ledger.db import session_scope
from warrant.ledger.memory import DEFAULT_MEMORY_KEYS, MemoryStore
from warrant.ledger.models import Artifact, Run

__all__ = ["ArtifactStore", "LedgerToolDeps"]


@dataclass(frozen=True)
class ArtifactStore:
    engine: Engine
    faults: Any = None
    """Fault injector (the demo service): a ``corrupt_read`` fault falsifies the read-back."""

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

    def get_sha256(self, *, run_id: str, path: str) -> str | None:
        if self.faults is not None and self.faults.corrupt_read("write_artifact"):
            return "0" * 64
        with session_scope(self.engine) as s:
            return s.execute(
                select(Artifact.sha256)
                .where(Artifact.run_id == run_id, Artifact.path == path)
                .order_by(Artifact.id.desc())
                .limit(1)
            ).scalar_one_or_none()


class LedgerToolDeps:
    """The ``deps`` handed to tools through :class:`~warrant.tools.contract.ToolContext`."""

    def __init__(
        self,
        engine: Engine,
        *,
        demo_engine: Engine | None = None,
        memory_keys: tuple[str, ...] = DEFAULT_MEMORY_KEYS,
    ) -> None:
        from warrant.tools.demo.service import DemoService

        self.engine = engine
        self.demo = DemoService(demo_engine or engine)
        self.artifacts = ArtifactStore(engine, faults=self.demo)
        self.memory = MemoryStore(engine, allowed_keys=memory_keys)

    def run_status(self, run_id: str) -> str | None:
        """The run's status, read from the ledger (backs the tools' cancellation flag)."""
        with self.engine.connect() as conn:
            return conn.execute(select(Run.status).where(Run.id == run_id)).scalar_one_or_none()
