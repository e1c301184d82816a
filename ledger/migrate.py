"""Apply Alembic migrations programmatically (``warrant db upgrade``)."""

from __future__ import annotations

import psycopg
from alembic import command
from alembic.config import Config
from psycopg import sql
from psycopg.errors import UndefinedTable
from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError

from warrant.ledger.db import engine_for, normalize_url, unbounded
from warrant.runner.errors import ServiceUnavailable

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
        unbounded(conn)  # a migration may rewrite a table, and waits for another's lock
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return current_revision(url)


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at; ``None`` only if it has no
    ``alembic_version`` table (never migrated) or that table is empty.

    Any other database error is reported, not read as "no revision yet": a database that
    cannot be reached raises :class:`ServiceUnavailable` ``DATABASE_UNAVAILABLE``, one whose
    revision cannot be read (permissions, a broken table) ``MIGRATION_STATE_UNREADABLE``."""
    try:
        with engine_for(url).connect() as conn:
            try:
                row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
            except ProgrammingError as exc:
                if isinstance(exc.orig, UndefinedTable):
                    return None
                raise
            return row[0] if row else None
    except OperationalError as exc:
        raise ServiceUnavailable(
            f"cannot reach the ledger database: {_first_line(exc)}", code="DATABASE_UNAVAILABLE"
        ) from exc
    except SQLAlchemyError as exc:
        raise ServiceUnavailable(
            f"cannot read the ledger's migration revision: {_first_line(exc)}",
            code="MIGRATION_STATE_UNREADABLE",
        ) from exc


def _first_line(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]


# -- Database administration outside the ledger's schema: creating the ledger's database.


def ensure_database(admin_url: str, name: str) -> bool:
    """Create the database ``name`` through the server at ``admin_url`` unless it exists.
    Returns whether it was created."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return True
