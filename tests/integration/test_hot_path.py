"""The stages' hot path: one read and one write per stage, and a lost compare-and-set writes
nothing at all (not its events, observation or guarded writes)."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo.scenarios import read_steps

from tests import facts
from tests.conftest import wait_for
from warrant.ledger.models import Command, GrantRow, Run, TraceEvent
from warrant.runner.canonical import sha256_hex

pytestmark = pytest.mark.services


def test_each_stage_reads_once_and_writes_once(engine, client, monkeypatch):
    import psycopg

    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.broker.policy.stage import policy_evaluate
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.tool.stage import tool_execute

    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher)
    stage = ["setup"]
    statements: collections.Counter[str] = collections.Counter()
    execute = psycopg.Cursor.execute

    def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements[stage[0]] += 1
        return execute(cursor, query, *args, **kwargs)

    calls: collections.Counter[str] = collections.Counter()

    def drive(run_id: str) -> None:
        publisher.planner(run_id, 1)
        while publisher.sent:
            name, m = publisher.sent.pop(0)
            stage[0] = name
            calls[name] += 1
            if name == "planner":
                planner_step(ctx, m["run_id"], m["version"])
            elif name == "policy":
                policy_evaluate(ctx, m["run_id"], m["version"])
            else:
                tool_execute(ctx, m["run_id"], m["version"], m["command_id"], tool=m["tool"])

    drive(client.start_run(read_steps(1), publish=False))  # warm: pools connected once
    calls.clear()
    run_id = client.start_run(read_steps(3), publish=False)
    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    drive(run_id)
    monkeypatch.undo()

    assert client.get_run(run_id).status == "completed"
    assert dict(calls) == {"planner": 4, "policy": 3, "tool": 3}
    # planner: load + transition; policy: load + transition; tool: claim + record.
    # (The final answer's planner step reads the observations once more to check citations.)
    assert statements["planner"] == 2 * 4 + 1
    assert statements["policy"] == 2 * 3
    assert statements["tool"] == 2 * 3
    names = [e.event for e in facts.events(engine, run_id)]
    assert names.count("tool.started") == names.count("tool.completed") == 3
    # the claim computes the token's hash in SQL: the same as the rest of the trace
    with engine.connect() as conn:
        tokens = dict(
            conn.execute(
                select(Command.step, Command.idempotency_token).where(Command.run_id == run_id)
            ).all()
        )
    for started in facts.events(engine, run_id, "tool.started"):
        assert started.details["idempotency_key_hash"] == sha256_hex(tokens[started.step])[:16]
        assert started.details["attempt"] == 1
    seqs = [e.seq for e in facts.events(engine, run_id)]
    assert seqs == list(range(1, len(seqs) + 1))  # dense: no sequence number lost


def test_a_lost_compare_and_set_writes_nothing(engine, client):
    from warrant.ledger.guarded import use_grants
    from warrant.ledger.repo import StaleVersion, transition
    from warrant.ledger.stage_loads import autocommit

    run_id = client.start_run(read_steps(1), publish=False)
    with engine.connect() as conn:
        grant_id = conn.execute(select(GrantRow.id).where(GrantRow.run_id == run_id)).scalar_one()

    def attempt(expected: int) -> int:
        with autocommit(engine) as conn:
            return transition(
                conn,
                run_id,
                expected,
                changes={"phase": "tool"},
                events=[("test.event", {"n": 1})],
                step=1,
                guarded=[use_grants([grant_id])],
            )

    def state() -> tuple[int, int, int]:
        with engine.connect() as conn:
            version = conn.execute(select(Run.version).where(Run.id == run_id)).scalar_one()
            uses = conn.execute(select(GrantRow.uses).where(GrantRow.id == grant_id)).scalar_one()
            n = len(conn.execute(select(TraceEvent.seq).where(TraceEvent.run_id == run_id)).all())
        return version, uses, n

    before = state()
    with pytest.raises(StaleVersion):
        attempt(before[0] + 5)
    assert state() == before
    assert attempt(before[0]) == before[0] + 1
    assert state() == (before[0] + 1, before[1] + 1, before[2] + 1)


def test_redis_broker_reuses_one_client_per_channel(services):
    """kombu builds a Redis client per publish and per ack; warrant's transport builds one
    per channel, and the messages still arrive."""
    if not (services.broker_url or "").startswith("redis://"):
        pytest.skip("the broker under test is not Redis")
    import redis

    from warrant.broker.app import make_app
    from warrant.runner.settings import WarrantSettings

    app = make_app(WarrantSettings(broker_url=services.broker_url))
    assert app.conf.broker_transport == "warrant.broker._redis_transport:Transport"
    queue = "warrant-transport-test"  # nobody consumes it
    backlog = redis.Redis.from_url(services.broker_url)
    backlog.delete(queue)
    clients = []
    try:
        with app.producer_or_acquire() as producer:
            for n in range(3):
                producer.publish({"n": n}, exchange="", routing_key=queue, serializer="json")
                with producer.channel.conn_or_acquire() as client:
                    clients.append(client)
        assert clients[0] is clients[1] is clients[2]
        assert backlog.llen(queue) == 3
    finally:
        backlog.delete(queue)


def test_other_brokers_keep_their_stock_transport():
    from warrant.broker.app import make_app
    from warrant.runner.settings import WarrantSettings

    app = make_app(WarrantSettings(broker_url="amqp://guest:guest@127.0.0.1:5672//"))
    assert app.conf.broker_transport is None


def test_starting_a_run_is_one_statement(engine, client, monkeypatch):
    import psycopg
    from warrant_demo import scenarios as sc

    from warrant.ledger.models import Observation

    spec = sc.spec(
        [sc.search("p1"), sc.final("x", "tool-1")],
        grants=[
            {"capability": "search:public", "resource_scope": "*"},
            {"capability": "artifact:write", "resource_scope": "notes/*", "max_uses": 2},
        ],
    )
    client.start_run(read_steps(1), publish=False)  # warm: the pool connected once
    statements = []
    execute = psycopg.Cursor.execute

    def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(query)
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    run_id = client.start_run(spec, publish=False)
    monkeypatch.undo()
    # one statement: the pool's liveness check at checkout polls the socket, no round trip
    assert len(statements) == 1
    with engine.connect() as conn:
        run = conn.execute(select(Run).where(Run.id == run_id)).one()
        grants = conn.execute(
            select(GrantRow.capability, GrantRow.resource_scope, GrantRow.max_uses, GrantRow.uses)
            .where(GrantRow.run_id == run_id)
            .order_by(GrantRow.id)
        ).all()
        goal = conn.execute(select(Observation).where(Observation.run_id == run_id)).one()
    assert (run.status, run.phase, run.version, run.trace_seq) == ("running", "planning", 1, 2)
    assert [tuple(g) for g in grants] == [
        ("search:public", "*", None, 0),
        ("artifact:write", "notes/*", 2, 0),
    ]
    assert (goal.observation_id, goal.kind) == ("user-1", "user-message")
    assert goal.observation_version == 1
    events = facts.events(engine, run_id)
    assert [(e.seq, e.event) for e in events] == [(1, "run.created"), (2, "state.transitioned")]
    assert events[0].details["grants"] == 2


def test_a_message_naming_another_tool_takes_the_general_path(engine, client, monkeypatch):
    """The claim only applies to the command's own tool: a message that names a read tool for
    a write command cannot make the write's start skip the WAL flush; the command still runs
    once, through the general (durable) path."""
    from warrant_demo.scenarios import SCENARIOS

    import warrant.broker.tool.stage as stage_tool
    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.broker.policy.stage import policy_evaluate
    from warrant.broker.publish import RecordingPublisher
    from warrant.ledger.models import Artifact

    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher)
    claims: list[tuple[str, bool]] = []
    claim = stage_tool.claim_command

    def recorded(conn: Any, **kwargs: Any) -> Any:
        row = claim(conn, **kwargs)
        claims.append((kwargs["tool"], row is not None))
        return row

    monkeypatch.setattr(stage_tool, "claim_command", recorded)
    spec = next(s for s in SCENARIOS if s["name"] == "artifact-written")["spec"]
    run_id = client.start_run(spec, publish=False)
    publisher.planner(run_id, 1)
    while publisher.sent:
        name, m = publisher.sent.pop(0)
        if name == "planner":
            planner_step(ctx, m["run_id"], m["version"])
        elif name == "policy":
            policy_evaluate(ctx, m["run_id"], m["version"])
        else:
            named = "noop_read" if m["tool"] == "write_artifact" else m["tool"]
            stage_tool.tool_execute(ctx, m["run_id"], m["version"], m["command_id"], tool=named)
    assert claims == [("search_public", True), ("noop_read", False)]
    assert client.get_run(run_id).status == "completed"
    assert facts.count(engine, Artifact, run_id=run_id) == 1
    started = facts.events(engine, run_id, "tool.started")
    assert [e.details["tool"] for e in started] == ["search_public", "write_artifact"]


def test_a_lost_server_connection_is_dropped_and_the_error_is_retryable(engine, client):
    """Hot statements run on the driver connection, out of SQLAlchemy's sight. A held
    connection the server ended while it was idle is replaced before its next use; one lost
    during a use must leave the pool, with an error the stage tasks retry."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError

    from warrant.broker.tasks import TRANSIENT
    from warrant.ledger.db import release_held
    from warrant.ledger.stage_loads import autocommit, run_status

    run_id = client.start_run(read_steps(1), publish=False)
    name = "warrant-connection-loss-test"
    lossy = create_engine(engine.url.update_query_dict({"application_name": name}))
    with autocommit(lossy) as conn:
        assert run_status(conn, run_id) == "running"
    _terminate_backends(engine, name)
    with autocommit(lossy) as again:  # ended while idle: replaced, no error
        assert again is not conn
        assert run_status(again, run_id) == "running"

    with pytest.raises(OperationalError) as lost, autocommit(lossy) as conn:
        _terminate_backends(engine, name)  # ended during the use
        run_status(conn, run_id)
    assert isinstance(lost.value, TRANSIENT)
    assert lost.value.connection_invalidated
    with autocommit(lossy) as conn:  # a fresh connection: the dead ones left the pool
        assert run_status(conn, run_id) == "running"
    release_held()
    lossy.dispose()


def _terminate_backends(engine: Any, application_name: str) -> None:
    """End the server sessions of ``application_name`` and wait until they are gone."""
    import time

    from sqlalchemy import text

    from warrant.ledger.stage_loads import autocommit

    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = :n"
    with autocommit(engine, held=False) as admin:  # (a transaction sees one snapshot)
        assert admin.execute(text(query), {"n": application_name}).scalar_one() >= 1
        admin.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :n"
            ),
            {"n": application_name},
        )
        deadline = time.monotonic() + 10
        while admin.execute(text(query), {"n": application_name}).scalar_one():
            assert time.monotonic() < deadline, "the backend did not go away"
            time.sleep(0.05)


def test_a_cancel_committed_during_the_claim_is_not_overwritten(engine, client):
    """The claim's run row is the row as updated: if a cancel commits while the claim waits
    for the run's lock, the row is newer than the message. The record must compare-and-set at
    the message's version (and lose), so the cancel is finished, not overwritten."""
    import threading
    import time

    from sqlalchemy import text

    from warrant.broker.context import context_for
    from warrant.broker.planner.stage import planner_step
    from warrant.broker.policy.stage import policy_evaluate
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.tool.stage import tool_execute

    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher)
    run_id = client.start_run(read_steps(2), publish=False)
    planner_step(ctx, run_id, 1)
    _, m = publisher.sent.pop()
    policy_evaluate(ctx, run_id, m["version"])
    _, m = publisher.sent.pop()
    assert not publisher.sent
    results: list[str] = []
    with engine.connect() as cancel:
        # a cancel's ledger write, held open: the run row stays locked until it commits
        cancel.execute(
            text("UPDATE runs SET status = 'cancelling', version = version + 1 WHERE id = :r"),
            {"r": run_id},
        )
        worker = threading.Thread(
            target=lambda: results.append(
                tool_execute(ctx, run_id, m["version"], m["command_id"], tool=m["tool"])
            )
        )
        worker.start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE '%%UPDATE commands c SET status = ''started''%%'"
        )
        deadline = time.monotonic() + 10
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as watch:
            while not watch.execute(text(waiting)).scalar_one():
                assert time.monotonic() < deadline, "the claim never waited for the run row"
                time.sleep(0.02)
        cancel.commit()
    worker.join(30)
    assert results, "the tool stage did not finish"
    info = client.get_run(run_id)
    assert info.status == "cancelled", (info.status, results)
    assert not [s for s in publisher.sent if s[0] == "planner"]  # the run did not go on
    assert facts.outcomes(engine, run_id) == 1


def test_a_thread_keeps_its_autocommit_connection_between_statements(engine, client):
    """Checked out once per thread and kept (not once per statement); a use that raises gives
    it back to the pool, and a nested use gets its own."""
    import threading

    from sqlalchemy import create_engine, event

    from warrant.ledger.db import autocommit_engine, release_held
    from warrant.ledger.stage_loads import autocommit, run_status

    run_id = client.start_run(read_steps(1), publish=False)
    own = create_engine(engine.url)
    checkouts: list[int] = []
    event.listen(autocommit_engine(own, held=True).pool, "checkout", lambda *_: checkouts.append(1))
    seen = set()
    for _ in range(5):
        with autocommit(own) as conn:
            assert run_status(conn, run_id) == "running"
            seen.add(id(conn))
    assert (len(checkouts), len(seen)) == (1, 1)

    with autocommit(own) as outer, autocommit(own) as inner:
        assert outer is not inner
    assert len(checkouts) == 2
    assert [outer.closed, inner.closed].count(True) == 1  # one kept, the other back in the pool

    with pytest.raises(RuntimeError), autocommit(own) as conn:
        raise RuntimeError("a failing stage")
    assert conn.closed  # back in the pool
    with autocommit(own) as conn:
        assert run_status(conn, run_id) == "running"

    other: list[Any] = []

    def in_thread() -> None:
        with autocommit(own) as conn:
            other.append(conn)
        release_held()

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert other[0] is not conn  # each thread has its own
    release_held()
    assert conn.closed

    with autocommit(own, held=False) as conn:  # a client's: for this use only
        assert run_status(conn, run_id) == "running"
    assert conn.closed
    own.dispose()


def test_memory_keys_are_bound_as_one_array_literal(engine):
    from sqlalchemy import text

    from warrant.ledger.stage_loads import _array_literal

    keys = ("plain", 'dq"uote', "back\\slash", "", "a,b", "{braces}", "NULL", " spaced ")
    with engine.connect() as conn:
        got = conn.execute(text("SELECT CAST(:k AS text[])"), {"k": _array_literal(keys)})
        assert tuple(got.scalar_one()) == keys


def test_a_stage_sees_the_run_budgets_the_spec_gave(engine, client):
    """Stages read the budgets as ``jsonb`` text and validate each text once per process."""
    from warrant.ledger.repo import _budgets_from_json, run_view
    from warrant.ledger.stage_loads import autocommit, load_policy
    from warrant.runner.spec import Budgets

    budgets = {"max_steps": 7, "max_tool_calls_per_tool": {"noop_read": 3}, "max_cost": 1.5}
    spec = {**read_steps(1), "budgets": budgets}
    first, second = (client.start_run(spec, publish=False) for _ in range(2))
    with autocommit(engine) as conn:
        views = [run_view(load_policy(conn, run_id)) for run_id in (first, second)]
    assert views[0].budgets == Budgets.model_validate(budgets)
    assert views[0].budgets.max_tool_calls_per_tool == {"noop_read": 3}
    assert views[0].budgets.deadline_s == Budgets().deadline_s  # defaults filled in
    assert views[1].budgets is views[0].budgets  # validated once: the same frozen object
    assert _budgets_from_json.cache_info().hits >= 1


def test_a_forked_child_never_uses_its_parents_held_connection(engine, client):
    """A prefork pool child starts with its parent's memory, held connections included: it
    must connect afresh, and the parent's connection must survive the child."""
    import os

    from sqlalchemy import text

    from warrant.ledger.db import reset_engines
    from warrant.ledger.stage_loads import autocommit

    backend = text("SELECT pg_backend_pid()")
    with autocommit(engine) as conn:
        parent_backend = conn.execute(backend).scalar_one()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: what a pool child does on start, then one stage statement
        code = 1
        try:
            reset_engines()
            with autocommit(engine) as conn:
                os.write(write, str(conn.execute(backend).scalar_one()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    child_backend = int(os.read(read, 64) or b"0")
    os.close(read)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_backend not in (0, parent_backend)
    with autocommit(engine) as conn:  # the parent's own connection is still its own and alive
        assert conn.execute(backend).scalar_one() == parent_backend


def test_many_threads_open_no_connection_per_use(engine):
    """The threads beyond the holders share the bounded pool's connections, kept open: a
    planner at 1000 runs in flight opened and closed one every other step when the pool kept 2
    and overflowed to 10 (a backend forked per connection, no prepared statement reused)."""
    import threading

    from sqlalchemy import create_engine, event, text

    from warrant.ledger.db import (
        DEFAULT_AUTOCOMMIT_POOL,
        DEFAULT_HELD_CONNECTIONS,
        autocommit_engine,
        release_held,
    )
    from warrant.ledger.stage_loads import autocommit

    many = create_engine(engine.url)
    opened = collections.Counter()
    for held in (False, True):
        event.listen(
            autocommit_engine(many, held=held),
            "connect",
            lambda *_, held=held: opened.update([held]),
        )
    threads, uses = 40, 25
    start, end = threading.Barrier(threads), threading.Barrier(threads)
    errors: list[BaseException] = []

    def use() -> None:
        try:
            start.wait(10)
            for _ in range(uses):
                with autocommit(many) as conn:
                    conn.execute(text("SELECT pg_sleep(0.001)"))
            end.wait(30)  # a pool's threads live on: none gives its connection back early
        except BaseException as exc:
            errors.append(exc)
        finally:
            release_held()

    workers = [threading.Thread(target=use) for _ in range(threads)]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
    finally:
        for e in (autocommit_engine(many), autocommit_engine(many, held=True), many):
            e.dispose()
    assert not errors
    assert opened[True] <= DEFAULT_HELD_CONNECTIONS  # one per holder, kept
    assert opened[False] <= DEFAULT_AUTOCOMMIT_POOL  # 800 shared uses, never a fresh one


def test_many_threads_keep_a_bounded_number_of_connections(engine):
    """A threads-pool worker (the planner: up to 1024 threads) must not keep a connection per
    thread: PostgreSQL's ``max_connections`` is 100 by default. The first threads keep theirs;
    the others check one out of the bounded pool for each use."""
    import threading

    from sqlalchemy import create_engine, text

    from warrant.ledger.db import (
        DEFAULT_AUTOCOMMIT_POOL,
        DEFAULT_HELD_CONNECTIONS,
        autocommit_engine,
        release_held,
    )
    from warrant.ledger.stage_loads import autocommit

    name = "warrant-held-bound-test"
    many = create_engine(engine.url.update_query_dict({"application_name": name}))
    threads = 40
    start, used, done = (
        threading.Barrier(threads),
        threading.Barrier(threads + 1),
        threading.Event(),
    )
    errors: list[BaseException] = []

    def use() -> None:
        try:
            start.wait(10)
            for _ in range(5):
                with autocommit(many) as conn:
                    conn.execute(text("SELECT pg_sleep(0.01)"))
            used.wait(30)
            done.wait(30)  # alive: what a thread keeps stays kept
        except BaseException as exc:
            errors.append(exc)
        finally:
            release_held()

    workers = [threading.Thread(target=use) for _ in range(threads)]
    for w in workers:
        w.start()
    try:
        used.wait(30)
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = :n"

        def kept() -> int:
            with autocommit(engine, held=False) as admin:
                return int(admin.execute(text(query), {"n": name}).scalar_one())

        # the threads that keep one, and the pool's idle connections (not one per thread); an
        # overflow connection the pool closed may still show until its backend has exited
        bound = DEFAULT_HELD_CONNECTIONS + DEFAULT_AUTOCOMMIT_POOL
        wait_for(lambda: kept() <= bound, timeout=10, what=f"at most {bound} connections")
        assert DEFAULT_HELD_CONNECTIONS <= kept() <= bound
    finally:
        done.set()
        for w in workers:
            w.join(30)
        for e in (autocommit_engine(many), autocommit_engine(many, held=True), many):
            e.dispose()
    assert not errors
