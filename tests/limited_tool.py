"""A tool whose external service counts the calls it is serving at once (the shared-limits
tests): ``held_call`` asks the counter service (a real HTTP server in the test process, its
URL in ``WARRANT_TEST_COUNTER_URL``) to hold it for ``ms`` milliseconds; the service keeps
the peak of calls in flight, whichever worker process or host sent them, and counts a call
until it has served it, even one whose caller gave up (an abandoned call).

The tool calls the way the docs tell tool authors to: through ``warrant.tools.blocking``'s
client (bounded by the attempt's deadline, shut down on interruption), passing its deadline
to the service (``budget_s``), which stops serving a call at that deadline, as services that
take a deadline do. The tool blocks in one socket read; the service in one plain sleep."""

from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
from pydantic import Field

from warrant.tools import SideEffect, Tool, ToolContext, ToolInput, ToolOutput
from warrant.tools._registry import Plugin
from warrant.tools.blocking import http_client

COUNTER_URL_ENV = "WARRANT_TEST_COUNTER_URL"


class HeldInput(ToolInput):
    n: int = Field(ge=0, le=10_000_000)
    """Any number (distinct per step)."""
    ms: int = Field(default=300, ge=0, le=60_000)
    """How long the service holds the call."""
    own_client: bool = False
    """Call through a client of its own, not the context's: nothing interrupts its read (the
    tool the worker reports as unreachable)."""


class HeldOutput(ToolOutput):
    n: int
    """The number, echoed."""


def _held(args: HeldInput, ctx: ToolContext) -> HeldOutput:
    url = os.environ[COUNTER_URL_ENV]
    budget = ctx.remaining_s()
    params = {"ms": args.ms, "run": ctx.run_id, "budget_s": budget}
    if args.own_client:
        httpx.get(f"{url}/hold", params=params, timeout=budget).raise_for_status()
        return HeldOutput(n=args.n)
    with http_client(ctx) as http:
        http.get(f"{url}/hold", params=params).raise_for_status()
    return HeldOutput(n=args.n)


HELD_CALL: Tool[HeldInput, HeldOutput] = Tool(
    name="held_call",
    version="1",
    description="Call a service that holds each call ms milliseconds (counts calls in flight).",
    input_model=HeldInput,
    output_model=HeldOutput,
    capabilities=("bench:read",),
    side_effect=SideEffect.READ,
    execute=_held,
    timeout_s=10.0,
    resource=lambda args, subject: "bench",
)

plugin = Plugin(name="limited", tools=(HELD_CALL,))


class CounterService:
    """The external service: ``GET /hold?ms=`` answers after ``ms``; ``peak`` is the most
    calls it was serving at once, ``calls`` every call with its (start, end) monotonic time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.calls: list[tuple[float, float]] = []
        self.budgets: list[float] = []
        """The time each call's caller said it had left (its deadline, as ``budget_s``)."""
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)
                started = service.enter()
                budget = float(query.get("budget_s", ["inf"])[0])
                service.budgets.append(budget)
                try:
                    time.sleep(min(int(query.get("ms", ["0"])[0]) / 1000, budget))
                finally:
                    service.leave(started)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def enter(self) -> float:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        return time.monotonic()

    def leave(self, started: float) -> None:
        with self.lock:
            self.in_flight -= 1
            self.calls.append((started, time.monotonic()))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> CounterService:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
