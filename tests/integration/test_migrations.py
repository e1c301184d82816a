"""Migrations: the schema they build is the models' schema, and every one goes down and up.

Runs in its own database (``<test database>_migrations``) so the session's ledger is kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from tests.services import Services, ensure_database
from warrant.ledger.chain import GENESIS, Head, check_run
from warrant.ledger.chain_store import read_chains
from warrant.ledger.db import engine_for
from warrant.ledger.migrate import alembic_config, current_revision, upgrade
from warrant.ledger.models import Base

pytestmark = pytest.mark.services


@pytest.fixture
def url(services: Services) -> Iterator[str]:
    url = f"{services.database_url}_migrations"
    ensure_database(url)
    engine = engine_for(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    yield url
    engine.dispose()


def _migrate(url: str, verb: str, revision: str) -> None:
    cfg = alembic_config(url)
    with engine_for(url).begin() as conn:
        cfg.attributes["connection"] = conn
        getattr(command, verb)(cfg, revision)


def _differences(url: str) -> list[Any]:
    with engine_for(url).connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), Base.metadata)


def test_head_schema_is_the_models_schema(url: str) -> None:
    upgrade(url)
    assert _differences(url) == []


def test_every_migration_goes_down_and_up_again_with_data(url: str) -> None:
    upgrade(url, "0007")
    with engine_for(url).begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (id, status, phase, version, step, model_calls,"
                " tool_calls, tool_calls_by_tool, observation_version, tokens_used,"
                " cost_used, trace_seq, goal, subject, spec, deadline_at)"
                " VALUES ('r1', 'running', 'planning', 1, 0, 0, 0, '{}', 1, 0, 0, 2,"
                " 'g', 's', '{}', now())"
            )
        )
        conn.execute(
            text(
                "INSERT INTO trace_events (run_id, seq, event, step, details)"
                " VALUES ('r1', 1, 'run.created', 0, '{}'), ('r1', 2, 'x', 0, '{}')"
            )
        )
    upgrade(url)
    with engine_for(url).connect() as conn:
        seqs = conn.execute(text("SELECT seq FROM trace_events WHERE run_id = 'r1' ORDER BY seq"))
        assert seqs.scalars().all() == [1, 2]
        allocated, rows = read_chains(conn, ["r1"])["r1"]  # 0018 chained the existing rows
        assert rows[0].prev_hash == GENESIS and rows[1].prev_hash == rows[0].hash
        assert isinstance(check_run("r1", rows, allocated), Head)
    _migrate(url, "downgrade", "0007")
    with engine_for(url).connect() as conn:
        ids = conn.execute(text("SELECT id FROM trace_events ORDER BY seq")).scalars().all()
        assert len(set(ids)) == 2
    _migrate(url, "downgrade", "base")
    assert set(inspect(engine_for(url)).get_table_names()) <= {"alembic_version"}
    upgrade(url)
    assert _differences(url) == []
    assert (
        current_revision(url) == ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    )


def test_only_a_missing_version_table_reads_as_no_revision(url: str) -> None:
    from warrant.runner.errors import ServiceUnavailable

    assert current_revision(url) is None  # never migrated: no alembic_version table
    with engine_for(url).begin() as conn:  # a version table that cannot be read
        conn.execute(text("CREATE TABLE alembic_version (something_else text)"))
    with pytest.raises(ServiceUnavailable) as caught:
        current_revision(url)
    assert caught.value.code == "MIGRATION_STATE_UNREADABLE"
    with engine_for(url).begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
    upgrade(url)
    assert current_revision(url) is not None


def test_an_unreachable_database_is_reported_not_read_as_no_revision() -> None:
    from warrant.runner.errors import ServiceUnavailable

    with pytest.raises(ServiceUnavailable) as caught:
        current_revision("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
    assert caught.value.code == "DATABASE_UNAVAILABLE"
