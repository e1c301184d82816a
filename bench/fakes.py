"""The latency bench's fake services: an OpenAI-compatible model and a tool service, each a
real HTTP server on loopback in a process of its own (uvicorn, asyncio: thousands of requests
wait at once, each on a timer, not a thread).

    python -m bench.fakes model|tool --fd N      (started by :class:`FakeService`)

Each answer waits a latency drawn from the service's profile (:class:`Latency`; set with
``POST /_bench/config``, which also resets the counters), and ``GET /_bench/stats`` gives what
the service counted since: requests, the requests being answered at once (``in_flight``) and
the most at one moment (``peak_in_flight``), and the latencies drawn (p50, p99).

A configuration with ``hold`` closes a gate: requests wait at it (``waiting``) until
``POST /_bench/open``, and their latency starts then. The bench starts N runs, waits until all
of them are waiting on their first model call, and opens the gate: the runs start at once,
whatever the time their client took to create them.

The model is stateless: it answers from the request alone. It counts the tool-result
observations the planner's prompt shows (``- tool-<step> [...]`` lines, as
:mod:`warrant.runner.planners.openai_compatible` renders them) and proposes ``http_read`` until
:data:`TOOL_CALLS` results are in, then ``final`` citing the last: three model calls and two
tool calls per run, whichever process asks (warrant's planner, the DBOS workflow).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import random
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

__all__ = ["TOOL", "TOOL_CALLS", "FakeService", "Latency", "model_reply", "thread_client"]

#: Tool calls per run (model calls: one more).
TOOL_CALLS = 2
#: The tool the model proposes (the demo plug-in's).
TOOL = "http_read"
#: An observation line of the planner's prompt: ``- tool-2 [source: ...``.
_OBSERVATION = re.compile(r"^- (tool-\d+) \[", re.MULTILINE)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class _Clients(threading.local):
    client: httpx.Client | None = None


_CLIENTS = _Clients()
_SSL: list[ssl.SSLContext] = []


def thread_client() -> httpx.Client:
    """The calling thread's HTTP client (kept: one keep-alive connection per thread), all on
    one SSL context: ``httpx.post`` builds a client and an SSL context per call, about 50 ms of
    CPU here, which would make the callers CPU-bound, not the services' latency."""
    if _CLIENTS.client is None:
        if not _SSL:
            _SSL.append(ssl.create_default_context())
        _CLIENTS.client = httpx.Client(verify=_SSL[0])
    return _CLIENTS.client


@dataclasses.dataclass(frozen=True)
class Latency:
    """A latency profile: ``fixed`` (always ``median_s``) or ``lognormal`` (median
    ``median_s``, p99 ``p99_factor`` times the median, capped at ``cap_factor`` times it)."""

    kind: str = "fixed"
    median_s: float = 0.0
    p99_factor: float = 5.0
    cap_factor: float = 10.0

    def draw(self, rng: random.Random) -> float:
        if self.kind == "fixed" or self.median_s <= 0:
            return self.median_s
        sigma = math.log(self.p99_factor) / 2.3263  # z of the 99th percentile
        return min(self.median_s * math.exp(rng.gauss(0.0, sigma)), self.cap_factor * self.median_s)

    def label(self) -> str:
        if self.median_s <= 0:
            return "0"
        if self.kind == "fixed":
            return f"{self.median_s:g} s"
        return f"lognormal p50 {self.median_s:g} s, p99 {self.median_s * self.p99_factor:g} s"


def _observations(body: dict[str, Any]) -> list[str]:
    """The tool-result observations a request's prompt shows, oldest first."""
    prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])
    return sorted(set(_OBSERVATION.findall(prompt)), key=lambda o: int(o.split("-")[1]))


def model_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion proposing the run's next call (see the module's docstring)."""
    seen = _observations(body)
    if len(seen) < TOOL_CALLS:
        name, arguments = TOOL, {"n": len(seen) + 1, "reason_summary": "read the next"}
    else:
        name, arguments = "final", {"answer": "done", "citations": [seen[-1]]}
    call = {"id": "call_0", "type": "function"}
    call["function"] = {"name": name, "arguments": json.dumps(arguments)}  # type: ignore[assignment]
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


class _Server:
    """The ASGI app: the bench's control paths, else one answer after one drawn latency."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.latency = Latency()
        self.rng = random.Random(31)
        self.gate = asyncio.Event()
        self.gate.set()
        self.reset()

    def reset(self) -> None:
        self.in_flight = self.peak_in_flight = self.requests = self.waiting = 0
        self.drawn: list[float] = []
        self.by_call: dict[int, int] = {}
        self.peak_by_call: dict[int, int] = {}

    def configure(self, body: bytes) -> None:
        config = json.loads(body)
        self.latency = Latency(**config["latency"])
        if config.get("hold"):
            self.gate.clear()
        else:
            self.gate.set()
        self.reset()

    def stats(self) -> dict[str, Any]:
        drawn = sorted(self.drawn) or [0.0]
        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "waiting": self.waiting,
            "peak_by_call": self.peak_by_call,
            "p50_s": drawn[len(drawn) // 2],
            "p99_s": drawn[min(len(drawn) - 1, int(len(drawn) * 0.99))],
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if path == "/_bench/config":
            self.configure(body)
            await _respond(send, {"ok": True})
        elif path == "/_bench/open":
            self.gate.set()
            await _respond(send, {"ok": True})
        elif path == "/_bench/stats":
            await _respond(send, self.stats())
        else:
            await _respond(send, await self._answer(body))

    async def _answer(self, body: bytes) -> dict[str, Any]:
        """One answer; in flight are counted in all and per model call of a run (its first,
        second, third: how many tool results its prompt shows, plus one)."""
        request = json.loads(body or b"{}") if self.kind == "model" else {}
        call = len(_observations(request)) + 1 if self.kind == "model" else 1
        self.requests += 1
        self.in_flight += 1
        self.by_call[call] = self.by_call.get(call, 0) + 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.peak_by_call[call] = max(self.peak_by_call.get(call, 0), self.by_call[call])
        try:
            if not self.gate.is_set():
                self.waiting += 1
                try:
                    await self.gate.wait()
                finally:
                    self.waiting -= 1
            delay = self.latency.draw(self.rng)
            self.drawn.append(delay)
            await asyncio.sleep(delay)
            if self.kind == "model":
                return model_reply(request)
            return {"record": "bench", "at": time.time()}
        finally:
            self.in_flight -= 1
            self.by_call[call] -= 1


async def _respond(send: Send, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class FakeService:
    """One fake service's process, on a loopback socket bound here (no port race): its URL,
    its profile and its counters."""

    def __init__(self, kind: str, logs: Path) -> None:
        self.kind = kind
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.port = self.sock.getsockname()[1]
        logs.mkdir(parents=True, exist_ok=True)
        out = open(logs / f"fake-{kind}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fakes", kind, "--fd", str(self.sock.fileno())],
            pass_fds=[self.sock.fileno()],
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        self._http = httpx.Client(base_url=self.root, timeout=10)
        end = time.monotonic() + 30
        while True:
            try:
                self.stats()
                break
            except httpx.HTTPError as exc:
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"fake {kind} service did not start ({out.name})") from exc
                time.sleep(0.05)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configure(self, latency: Latency, *, hold: bool = False) -> None:
        """The latency profile; ``hold``: requests wait at the gate until :meth:`open`."""
        body = {"latency": dataclasses.asdict(latency), "hold": hold}
        self._http.post("/_bench/config", json=body).raise_for_status()

    def open(self) -> None:
        self._http.post("/_bench/open").raise_for_status()

    def stats(self) -> dict[str, Any]:
        response = self._http.get("/_bench/stats")
        response.raise_for_status()
        return dict(response.json())

    def stop(self) -> None:
        self._http.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=("model", "tool"))
    parser.add_argument("--fd", type=int, required=True, help="a listening socket's descriptor")
    args = parser.parse_args()
    config = uvicorn.Config(
        _Server(args.kind),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=120,
    )
    sock = socket.socket(fileno=args.fd)  # the parent's listening socket, inherited
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
