"""Hot statements run on the driver connection: compiled once, no per-call SQLAlchemy work.

SQLAlchemy builds and caches these statements (one per shape), but executing a large CTE
through it costs a cache-key walk of the whole statement on every call. The stages' few hot
statements are compiled to SQL text once and executed with psycopg directly, on the very
connection (and transaction, if any) SQLAlchemy holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb
from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import JSON, JSONB
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

__all__ = ["Compiled", "driver_connection"]

_DIALECT = PGDialect_psycopg()


def driver_connection(conn: Connection | Session) -> Any:
    """The psycopg connection behind a SQLAlchemy connection or session (joining its
    transaction, if one is open)."""
    if isinstance(conn, Session):
        conn = conn.connection()
    return conn.connection.driver_connection


@dataclass(frozen=True)
class Compiled:
    sql: str
    defaults: dict[str, Any]
    """Values of the statement's own literals (``version + 1``)."""
    json_params: frozenset[str]
    """Parameters bound as ``jsonb``."""

    @classmethod
    def of(cls, statement: Any) -> Compiled:
        compiled = statement.compile(dialect=_DIALECT)
        return cls(
            sql=compiled.string,
            defaults={k: v for k, v in compiled.params.items() if v is not None},
            json_params=frozenset(
                name for name, bind in compiled.binds.items() if isinstance(bind.type, JSON | JSONB)
            ),
        )

    @classmethod
    def text(cls, sql: str) -> Compiled:
        """Plain SQL with ``%(name)s`` placeholders."""
        return cls(sql=sql, defaults={}, json_params=frozenset())

    def first(self, conn: Connection | Session, params: dict[str, Any]) -> Any:
        """The first row (a named tuple) or None."""
        return self._run(conn, params, lambda cursor: cursor.fetchone())

    def all(self, conn: Connection | Session, params: dict[str, Any]) -> list[Any]:
        """Every row (named tuples)."""
        return self._run(conn, params, lambda cursor: cursor.fetchall())

    def _run(self, conn: Connection | Session, params: dict[str, Any], fetch: Any) -> Any:
        values = {**self.defaults, **params} if self.defaults else dict(params)
        for name in self.json_params:
            value = values.get(name)
            if value is not None:
                values[name] = Jsonb(value)
        cursor = driver_connection(conn).cursor(row_factory=namedtuple_row)
        try:
            return fetch(cursor.execute(self.sql, values))
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            # SQLAlchemy did not run this statement, so it cannot see the failure: drop the
            # connection ourselves and raise SQLAlchemy's error (the stage tasks retry it).
            _discard(conn, exc)
            raise DBAPIError.instance(
                self.sql, values, exc, psycopg.Error, connection_invalidated=True
            ) from exc
        finally:
            cursor.close()


def _discard(conn: Connection | Session, exc: Any) -> None:
    """Invalidate the connection; if the server went away, every pooled one predates that."""
    connection = conn.connection() if isinstance(conn, Session) else conn
    lost = connection.dialect.is_disconnect(exc, connection.connection.dbapi_connection, None)
    connection.invalidate(exc)
    if lost:
        connection.engine.dispose(close=False)
