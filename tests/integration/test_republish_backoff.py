"""The stalled-run sweep backs off (issue 30): a run whose message nobody takes is re-published
after ``stall_after_s``, then after twice that, and so on up to a cap, not once per
``stall_after_s`` for as long as the workers are away; a run that moves on starts again.

Driven in one process on a database of its own (no session worker sweeps it); the test moves
the run's last progress back in database time."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from warrant_demo import scenarios as sc

from tests import facts
from tests.services import ensure_database
from warrant.broker.reconciler.stage import REPUBLISH_CAP_S, republish_wait_s

pytestmark = pytest.mark.services

STALL_S = 10.0


def test_the_wait_doubles_up_to_the_cap():
    waits = [republish_wait_s(STALL_S, k) for k in range(8)]
    assert waits[:3] == [10.0, 20.0, 40.0]
    assert max(waits) == REPUBLISH_CAP_S and waits[-1] == REPUBLISH_CAP_S
    assert republish_wait_s(300.0, 5) == 300.0  # a longer stall time is never shortened


@pytest.fixture
def private_url(services) -> Iterator[str]:
    from warrant.ledger.migrate import upgrade

    url = services.database_url.rsplit("/", 1)[0] + f"/warrant_republish_{uuid.uuid4().hex[:8]}"
    ensure_database(url)
    upgrade(url)
    yield url
    import psycopg

    from warrant.ledger.db import reset_engines

    reset_engines()
    admin, name = url.rsplit("/", 1)
    with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sweep(ctx: Any, settings: Any) -> int:
    from warrant.broker.reconciler.stage import sweep

    return sweep(ctx, settings).republished


def test_a_run_nobody_takes_is_republished_ever_more_rarely(private_url):
    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.ledger.db import engine_for
    from warrant.runner.client.api import Client
    from warrant.runner.settings import WarrantSettings

    settings = WarrantSettings(stall_after_s=STALL_S, database_url=private_url)
    engine = engine_for(private_url)
    publisher = RecordingPublisher()
    ctx = context_for(engine, publisher=publisher, settings=settings)
    run_id = Client(engine=engine, publisher=publisher).start_run(
        sc.spec([sc.search("p1"), sc.final("x", "tool-1")]), publish=False
    )

    def stall_by(seconds: float) -> None:  # the run last moved that long ago (database time)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE runs SET updated_at = now() - make_interval(secs => :s) WHERE id = :id"
                ),
                {"s": seconds, "id": run_id},
            )

    republished = []
    # each sweep sees the run stalled for 15 s since its last re-publish (or start)
    for _ in range(4):
        stall_by(15.0)
        republished.append(_sweep(ctx, settings))
    # 15 s >= 10 s: the first; then 15 s < 20 s: waits, however often the sweep comes
    assert republished == [1, 0, 0, 0]
    stall_by(25.0)
    assert _sweep(ctx, settings) == 1  # 25 s >= 20 s: the second
    stall_by(25.0)
    assert _sweep(ctx, settings) == 0  # the third waits 40 s
    stall_by(REPUBLISH_CAP_S + 1)
    assert _sweep(ctx, settings) == 1
    events = facts.events(engine, run_id, "run.republished")
    assert [e.details["attempt"] for e in events] == [1, 2, 3]
    assert [m for m in publisher.sent if m[0] == "planner"] == [
        ("planner", {"run_id": run_id, "version": 1})
    ] * 3

    # the run moves to another version: the next re-publish waits stall_after_s again
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET version = version + 1 WHERE id = :id"), {"id": run_id})
    stall_by(STALL_S + 1)
    assert _sweep(ctx, settings) == 1
    assert facts.events(engine, run_id, "run.republished")[-1].details["attempt"] == 1
