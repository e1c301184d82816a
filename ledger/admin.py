"""Database administration outside the ledger's schema: creating the ledger's database."""

from __future__ import annotations

import psycopg
from psycopg import sql

__all__ = ["ensure_database"]


def ensure_database(admin_url: str, name: str) -> bool:
    """Create the database ``name`` through the server at ``admin_url`` unless it exists.
    Returns whether it was created."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return True
