"""Finding real Redis/RabbitMQ and PostgreSQL for the tests (embedded ones as fallback).

Locally, service-backed tests are skipped when nothing can be reached; under ``CI=true``
they fail instead.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TEST_DATABASE = "postgresql://postgres@127.0.0.1:5432/warrant_test"
DEFAULT_TEST_BROKER = "redis://127.0.0.1:6379/15"


@dataclass
class Services:
    broker_url: str | None
    database_url: str | None
    problem: str | None = None
    embedded: object | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _admin_url(database_url: str) -> tuple[str, str]:
    from sqlalchemy.engine import make_url

    url = make_url(database_url.replace("postgresql+psycopg://", "postgresql://"))
    return url.set(database="postgres").render_as_string(hide_password=False), url.database or ""


def ensure_database(database_url: str) -> None:
    import psycopg

    admin, name = _admin_url(database_url)
    with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def broker_reachable(url: str) -> None:
    from kombu import Connection

    with Connection(url, connect_timeout=3) as conn:
        conn.ensure_connection(max_retries=1)


def discover() -> Services:
    database = os.environ.get("WARRANT_TEST_DATABASE_URL", DEFAULT_TEST_DATABASE)
    broker = os.environ.get("WARRANT_TEST_BROKER_URL", DEFAULT_TEST_BROKER)
    try:
        ensure_database(database)
        broker_reachable(broker)
        return Services(broker, database)
    except Exception as exc:
        first_problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    explicit = os.environ.get("WARRANT_TEST_DATABASE_URL") or os.environ.get(
        "WARRANT_TEST_BROKER_URL"
    )
    if os.environ.get("WARRANT_TEST_NO_EMBEDDED") or explicit:
        # Asked for specific services (e.g. RabbitMQ): never swap in embedded ones.
        return Services(None, None, first_problem)
    try:
        from warrant.runner.stack.embedded import EmbeddedServices

        data = Path(os.environ.get("WARRANT_TEST_DATA_DIR") or tempfile.mkdtemp(prefix="wt-"))
        emb = EmbeddedServices(data).start()
        broker_reachable(emb.broker_url)
        return Services(emb.broker_url, emb.database_url, embedded=emb)
    except Exception as exc:
        return Services(None, None, f"{first_problem}; embedded fallback failed: {exc}")
