"""The workers' registrations (one row per worker process): what tool set each running worker
has. Re-exported by :mod:`warrant.ledger.models`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from warrant.ledger.model_base import JSON, Base
from warrant.ledger.model_base import created_now as _now

__all__ = ["WorkerRegistration"]


class WorkerRegistration(Base):
    """What tool set a running worker has: written when it starts, refreshed while it runs,
    removed when it stops. The policy gate and ``warrant tools check`` read it to tell when
    the roles disagree."""

    __tablename__ = "worker_registrations"

    process: Mapped[str] = mapped_column(String(80), primary_key=True)
    """The worker process's identity (``<pid>.<started>.<space>``; unique across hosts)."""
    node: Mapped[str] = mapped_column(String(255), index=True)
    """Celery node name (``tool-1234@host``): for people; two workers may share one."""
    roles: Mapped[list[Any]] = mapped_column(JSON)
    queues: Mapped[list[Any]] = mapped_column(JSON)
    fingerprint: Mapped[str] = mapped_column(String(64))
    tools: Mapped[list[Any]] = mapped_column(JSON)
    """``name@version`` of every tool in the worker's registry."""
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = _now()
    seen_at: Mapped[datetime] = _now()
