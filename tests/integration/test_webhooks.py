"""Webhooks over the real pipeline: the ledger owes a call when a run waits for a person or
ends (recorded in the transition's own statement), and the reconciler sweep delivers it,
signed, retrying with backoff until a 2xx or the attempt limit."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import wait_for
from tests.integration.test_gate_pipeline import memory_spec, save
from warrant.ledger.db import session_scope
from warrant.ledger.models import WebhookDelivery
from warrant.runner.settings import WarrantSettings
from warrant.runner.webhook_signing import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify,
)

pytestmark = [pytest.mark.services, pytest.mark.slow]

SECRET = "test-webhook-secret"


@dataclass
class Call:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def signed(self) -> bool:
        return verify(
            SECRET,
            self.body,
            self.headers.get(TIMESTAMP_HEADER),
            self.headers.get(SIGNATURE_HEADER),
        )


@dataclass
class Receiver:
    """A local endpoint: the first ``fail_first`` calls to a path get a 500, later ones 200."""

    url: str = ""
    fail_first: int = 2
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            seen = sum(1 for c in self.calls if c.path == path)
            code = 500 if seen < self.fail_first else 200
            self.calls.append(Call(path, headers, body, code))
            return code

    def accepted(self, path: str, event: str | None = None) -> list[Call]:
        with self.lock:
            return [
                c
                for c in self.calls
                if c.path == path
                and c.answered == 200
                and (event is None or c.payload["event"] == event)
            ]

    def to(self, path: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.path == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            code = state.answer(self.path, dict(self.headers.items()), body)
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def sweeper(engine: Any) -> Any:
    """One reconciler sweep per call, with a secret and a short backoff (a reconciler worker
    of the session, started without a secret, leaves the deliveries alone)."""
    from warrant.broker.context import context_for
    from warrant.broker.publish import RecordingPublisher
    from warrant.broker.reconciler.stage import sweep

    settings = WarrantSettings(
        webhook_secret=SECRET,
        webhook_retry_base_s=0.05,
        webhook_retry_cap_s=0.1,
        webhook_max_attempts=3,
    )
    ctx = context_for(engine, publisher=RecordingPublisher(), settings=settings)
    return lambda: sweep(ctx, settings)


def deliveries(engine: Any, run_id: str) -> dict[str, WebhookDelivery]:
    with session_scope(engine) as s:
        rows = s.scalars(select(WebhookDelivery).where(WebhookDelivery.run_id == run_id))
        return {d.event: d for d in rows}


def test_waiting_and_ended_are_delivered_signed_once_each(
    engine, client, worker, receiver, sweeper, monkeypatch
):
    monkeypatch.setenv("WARRANT_WEBHOOK_SECRET", SECRET)  # the producer's deployment
    subject = "webhook-roundtrip"
    spec = memory_spec(
        [sc.search("p1"), save("zh-CN"), sc.final("Saved.", "tool-1", "tool-2")], subject
    )
    spec["webhook"] = {"url": receiver.url + "/hook"}
    run_id = client.start_run(spec)
    waiting = client.wait(run_id, timeout=30)
    assert waiting.status == "waiting_confirmation", waiting

    # Owed in the same commit as the status change; sent by the sweep: 500, 500, then 200.
    owed = deliveries(engine, run_id)["waiting"]
    assert (owed.run_version, owed.status, owed.url) == (
        waiting.version,
        "pending",
        receiver.url + "/hook",
    )
    wait_for(lambda: sweeper() and receiver.accepted("/hook", "waiting"), what="waiting call")
    first = deliveries(engine, run_id)["waiting"]
    assert (first.status, first.attempts, first.last_status) == ("delivered", 3, 200)
    assert first.delivered_at is not None

    h = waiting.confirmation_request["proposal_hash"]
    client.confirm(run_id, proposal_hash=h, by="alice")
    done = client.wait(run_id, timeout=30)
    assert (done.status, done.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    wait_for(lambda: sweeper() and receiver.accepted("/hook", "ended"), what="ended call")
    for _ in range(3):  # nothing more is owed
        sweeper()

    calls = receiver.to("/hook")
    assert [c.answered for c in calls] == [500, 500, 200, 200]
    assert all(c.signed for c in calls)
    assert len({c.headers[DELIVERY_HEADER] for c in calls[:3]}) == 1  # one delivery, retried
    assert (
        len(receiver.accepted("/hook", "waiting")) == len(receiver.accepted("/hook", "ended")) == 1
    )
    told = receiver.accepted("/hook", "waiting")[0].payload
    assert told == {
        "run_id": run_id,
        "version": waiting.version,
        "event": "waiting",
        "status": "waiting_confirmation",
        "stop_reason": waiting.stop_reason,
        "confirmation_request": waiting.confirmation_request,
        "answer": None,
    }
    ended = receiver.accepted("/hook", "ended")[0].payload
    assert (ended["status"], ended["stop_reason"], ended["answer"]) == (
        "completed",
        "FINAL_ANSWER_VALIDATED",
        "Saved.",
    )
    assert ended["version"] == done.version and ended["confirmation_request"] is None

    rows = deliveries(engine, run_id)
    assert set(rows) == {"waiting", "ended"}
    assert (rows["ended"].status, rows["ended"].attempts) == ("delivered", 1)
    failed = facts.events(engine, run_id, "webhook.failed")
    assert [
        (e.details["attempt"], e.details["status_code"], e.details["final"]) for e in failed
    ] == [
        (1, 500, False),
        (2, 500, False),
    ]
    delivered = facts.events(engine, run_id, "webhook.delivered")
    assert [(e.details["event"], e.details["attempt"]) for e in delivered] == [
        ("waiting", 3),
        ("ended", 1),
    ]


def test_a_run_without_webhook_owes_nothing(engine, run_to_end):
    info = run_to_end(sc.spec([sc.search("p1"), sc.final("Done.", "tool-1")]))
    assert info.status == "completed"
    assert deliveries(engine, info.run_id) == {}


def test_an_unreachable_endpoint_fails_after_the_attempt_limit(
    engine, run_to_end, sweeper, monkeypatch
):
    monkeypatch.setenv("WARRANT_WEBHOOK_SECRET", SECRET)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = sc.spec([{"kind": "clarify", "question": "Which account?"}])
    spec["webhook"] = {"url": f"http://127.0.0.1:{port}/gone"}
    info = run_to_end(spec)
    assert info.status == "needs_input"

    def given_up() -> bool:
        sweeper()
        return deliveries(engine, info.run_id)["waiting"].status == "failed"

    wait_for(given_up, what="delivery given up")
    row = deliveries(engine, info.run_id)["waiting"]
    assert (row.attempts, row.last_status) == (3, None)
    assert row.last_error and "ConnectError" in row.last_error
    failed = facts.events(engine, info.run_id, "webhook.failed")
    assert [(e.details["attempt"], e.details["final"]) for e in failed] == [
        (1, False),
        (2, False),
        (3, True),
    ]
    assert not facts.events(engine, info.run_id, "webhook.delivered")


def test_an_external_callers_decisions_are_delivered(
    engine, client, worker, receiver, sweeper, monkeypatch
):
    """Planner kind ``external``: each decision that hands the step back to the caller
    (refused, executed) is a ``decided`` call naming the step; a planner's runs owe none."""
    monkeypatch.setenv("WARRANT_WEBHOOK_SECRET", SECRET)
    receiver.fail_first = 0
    spec = sc.spec([], grants=[sc.SEARCH_GRANT])
    spec["planner"] = {"kind": "external"}
    spec["webhook"] = {"url": receiver.url + "/ext"}
    run_id = client.start_run(spec)
    refused = client.propose(run_id, {"kind": "tool", "tool": "nope"}, by="agent", wait_s=20)
    assert refused.state == "refused"
    executed = client.propose(run_id, sc.search("p2"), by="agent", wait_s=20)
    assert executed.state == "executed"
    wait_for(
        lambda: sweeper() and len(receiver.accepted("/ext", "decided")) == 2, what="decided x2"
    )
    told = [c.payload for c in receiver.accepted("/ext", "decided")]
    assert [(p["event"], p["status"]) for p in told] == [("decided", "running")] * 2
    assert all(p["step"] >= 1 for p in told)
    assert all(c.signed for c in receiver.accepted("/ext"))
    with session_scope(engine) as s:
        versions = sorted(
            d.run_version
            for d in s.scalars(select(WebhookDelivery).where(WebhookDelivery.run_id == run_id))
        )
    assert len(versions) == 2 and versions[0] < versions[1]
    planner_run = client.start_run(
        {
            **sc.spec([sc.search("p1"), sc.final("x", "tool-1")]),
            "webhook": {"url": receiver.url + "/own"},
        }
    )
    assert client.wait(planner_run, timeout=30).status == "completed"
    assert set(deliveries(engine, planner_run)) == {"ended"}
