"""Apply Alembic migrations programmatically (``warrant db upgrade``)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import text

from warrant.ledger.db import engine_for, normalize_url

__all__ = ["alembic_config", "current_revision", "upgrade"]

#: Advisory lock key so concurrent ``warrant up`` processes migrate one at a time.
_MIGRATION_LOCK = 0x5741_5252


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", "warrant.ledger:migrations")
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> str | None:
    """Migrate the database at ``url`` to ``revision``; returns the revision reached."""
    engine = engine_for(url)
    cfg = alembic_config(url)
    with engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return current_revision(url)


def current_revision(url: str) -> str | None:
    with engine_for(url).connect() as conn:
        try:
            row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
        except Exception:
            return None
        return row[0] if row else None
