"""Connections survive a database restart: the Client's, the tools' (``ctx.deps``) and a
stage worker's held one. Against a PostgreSQL of the test's own (tests/own_postgres.py),
restarted and killed here; the shared servers are never touched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from warrant_demo import scenarios as sc

from tests.conftest import IN_CI
from tests.own_postgres import OwnPostgres, postgres_binaries

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own_pg() -> Iterator[OwnPostgres]:
    bin_dir = postgres_binaries()
    if bin_dir is None:
        if IN_CI:
            pytest.fail("CI=true and no PostgreSQL binaries (initdb, pg_ctl) to start a server")
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) to start a server of our own")
    server = OwnPostgres(bin_dir=bin_dir).init()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def own_url(own_pg: OwnPostgres) -> str:
    from warrant.ledger.migrate import upgrade

    url = own_pg.create_database("warrant_restart")
    upgrade(url)
    return url


def _spec() -> dict[str, Any]:
    return sc.spec([sc.search("p1"), sc.final("x", "tool-1")])


def _use_everything(client: Any, ctx: Any, run_id: str) -> None:
    """Each kind of connection once: the Client's (sessions, a checked-out autocommit one),
    the tools' ledger stores and a stage's held autocommit connection."""
    from warrant.ledger.stage_loads import autocommit, run_status

    assert client.get_run(run_id).status == "running"
    assert client.wait(run_id, timeout=0).status == "running"
    assert [r.run_id for r in client.list_runs(limit=500)].count(run_id) == 1
    assert ctx.tool_deps.run_status(run_id) == "running"
    assert ctx.tool_deps.artifacts.get_sha256(run_id=run_id, path="none") is None
    assert ctx.tool_deps.memory.records("alice") is not None
    with autocommit(ctx.engine) as conn:  # held between uses, as in a stage worker
        assert run_status(conn, run_id) == "running"


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_client_tool_deps_and_held_connections_survive_a_database_restart(
    own_pg: OwnPostgres, own_url: str, how: str
) -> None:
    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.ledger.db import engine_for, release_held
    from warrant.runner.client.api import Client

    engine = engine_for(own_url)
    publisher = RecordingPublisher()
    client = Client(engine=engine, publisher=publisher)
    ctx = context_for(engine, publisher=publisher)
    run_id = client.start_run(_spec())
    _use_everything(client, ctx, run_id)  # every pool now holds connections

    if how == "restart":
        own_pg.restart()
    else:
        own_pg.kill()
        own_pg.start()

    second = client.start_run(_spec())  # no exception: stale connections are replaced
    assert publisher.sent[-1] == ("planner", {"run_id": second, "version": 1})
    _use_everything(client, ctx, second)
    _use_everything(client, ctx, run_id)
    release_held()


def test_a_start_whose_insert_committed_before_the_connection_was_lost_is_not_repeated(
    own_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run insert is keyed by the run id: repeated after a lost connection, it finds the
    row the first attempt committed, and the start succeeds with one run."""
    from sqlalchemy import func, select
    from sqlalchemy.exc import OperationalError

    from warrant.broker.publish import RecordingPublisher
    from warrant.ledger.db import engine_for, session_scope
    from warrant.ledger.models import Run
    from warrant.runner.client.api import Client

    client = Client(engine=engine_for(own_url), publisher=RecordingPublisher())
    insert = Client._insert_run
    calls: list[str] = []

    def committed_then_lost(self: Client, run_id: str, *args: Any, **kwargs: Any) -> None:
        calls.append(run_id)
        insert(self, run_id, *args, **kwargs)
        if len(calls) == 1:  # the commit happened; its acknowledgement was lost
            raise OperationalError(
                "INSERT", {}, Exception("server closed the connection"), connection_invalidated=True
            )

    monkeypatch.setattr(Client, "_insert_run", committed_then_lost)
    run_id = client.start_run(_spec(), publish=False)
    assert calls == [run_id, run_id]
    with session_scope(client.engine) as s:
        assert s.scalar(select(func.count()).select_from(Run).where(Run.id == run_id)) == 1


def test_reads_are_retried_once_on_a_lost_connection_and_other_errors_are_not() -> None:
    from sqlalchemy.exc import OperationalError, ProgrammingError

    from warrant.ledger.db import retry_once_on_disconnect

    def failing(error: Exception, times: int) -> Any:
        calls: list[int] = []

        @retry_once_on_disconnect
        def read() -> str:
            calls.append(1)
            if len(calls) <= times:
                raise error
            return "ok"

        return read, calls

    lost = OperationalError("SELECT", {}, Exception("gone"), connection_invalidated=True)
    read, calls = failing(lost, 1)
    assert read() == "ok" and len(calls) == 2
    read, calls = failing(lost, 2)
    with pytest.raises(OperationalError):
        read()
    assert len(calls) == 2  # once more, not forever
    bad = ProgrammingError("SELECT", {}, Exception("syntax"))
    read, calls = failing(bad, 1)
    with pytest.raises(ProgrammingError):
        read()
    assert len(calls) == 1


@pytest.mark.services
@pytest.mark.parametrize(
    ("side_effect", "expected"),
    [("read", ("failed", True, None)), ("idempotent-write", ("unknown", False, "UNKNOWN_EFFECT"))],
)
def test_a_database_lost_during_a_tool_call_is_transient(engine, side_effect, expected):
    """A tool whose database session is ended mid-query (what a restart does): a read fails
    retryably, a write is ``unknown`` (the reconciler asks) — never an internal error."""
    import threading
    import time
    import uuid

    from sqlalchemy import create_engine, text

    from tests.integration.test_hot_path import _terminate_backends
    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.tool._call import Snapshot, run_tool
    from warrant.tools._contract import SideEffect, Tool, ToolInput, ToolOutput

    name = f"tool-{uuid.uuid4().hex[:8]}"
    lossy = create_engine(engine.url.update_query_dict({"application_name": name}))

    class In(ToolInput):
        n: int
        """Anything."""

    class Out(ToolOutput):
        n: int
        """Echoed."""

    def execute(args: In, ctx: Any) -> Out:
        with lossy.connect() as conn:
            conn.execute(text("SELECT pg_sleep(10)"))
        return Out(n=args.n)

    tool: Tool[In, Out] = Tool(
        name="db_call",
        version="1",
        description="Sleeps in its database.",
        input_model=In,
        output_model=Out,
        capabilities=("db:call",),
        side_effect=SideEffect(side_effect),
        execute=execute,
        timeout_s=20.0,
    )
    ctx = context_for(engine, publisher=RecordingPublisher())
    snap = Snapshot(
        command_id="c",
        run_id="r",
        version=1,
        step=1,
        proposal_id="p1",
        arguments={"n": 1},
        token="t",
        attempt=1,
        deadline_at=time.time() + 30,
        timeout_s=20.0,
        subject="s",
        confirmation_id=None,
        started_at=time.time(),
        view=None,  # type: ignore[arg-type]
    )

    def end_the_session() -> None:
        from tests.conftest import wait_for

        query = text(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = :n AND "
            "query LIKE 'SELECT pg_sleep%'"
        )
        from warrant.ledger.stage_loads import autocommit

        with autocommit(engine, held=False) as admin:  # (a transaction sees one snapshot)
            wait_for(lambda: admin.execute(query, {"n": name}).scalar_one(), what="in the call")
        _terminate_backends(engine, name)

    killer = threading.Thread(target=end_the_session)
    killer.start()
    started = time.monotonic()
    result = run_tool(ctx, tool, snap)
    killer.join(15)
    lossy.dispose()
    assert time.monotonic() - started < 9  # cut by the lost session, not by the sleep
    assert (result.status.value, result.retryable, getattr(result.stop, "value", None)) == expected
    assert result.code == "DATABASE_UNAVAILABLE"
