"""Model calls over one shared asynchronous HTTP client per process, waited on by the calling
thread, and abandoned at once when the run is cancelled.

Each planner thread used to open its own connection per call (``httpx.post``) and could only
wait for the answer. Here every call of the process goes through one ``httpx.AsyncClient`` on
one event-loop thread (connections are kept and reused), and the calling thread waits on the
call's completion or its run's cancel signal, whichever comes first: a cancel cancels the
request (its connection is closed), so the model stops being waited on within the run watch's
interval."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from concurrent.futures import Future
from typing import Any

import httpx

from warrant.runner.cancellation import CancelSignal
from warrant.runner.codes import ErrorCode
from warrant.runner.errors import WarrantError

__all__ = ["Abandoned", "post"]

#: Connections one process keeps to model endpoints (a planner process holds
#: ``WARRANT_PLANNER_CONCURRENCY`` calls at most).
MAX_CONNECTIONS = 1024
#: Connection pools the connections are spread over.
SHARDS = 256


class Abandoned(WarrantError):
    """The run was cancelled while its model call was in flight; the request was cancelled."""

    code: str = ErrorCode.MODEL_CALL_ABANDONED

    def __init__(self) -> None:
        super().__init__("the run was cancelled while its model call was in flight")


class _Loop:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, name="warrant-model-http", daemon=True).start()
        self.ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        per = max(1, MAX_CONNECTIONS // SHARDS)
        limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
        context = httpx.create_ssl_context()  # one for all: each costs CPU and memory
        self.clients = [httpx.AsyncClient(limits=limits, verify=context) for _ in range(SHARDS)]
        self.turn = itertools.count()
        self.ready.set()
        self.loop.run_forever()

    @property
    def client(self) -> httpx.AsyncClient:
        """The next client, in turn: httpcore's pool looks at each of its connections on every
        request and response, so the process's connections are spread over :data:`SHARDS`
        small pools (one pool of 512 connections cost the planner 27.8 ms of CPU per step,
        256 pools 9.5 ms: ``python -m bench.latency``)."""
        return self.clients[next(self.turn) % SHARDS]


_loop: _Loop | None = None
_lock = threading.Lock()


def _the_loop() -> _Loop:
    global _loop
    with _lock:
        if _loop is None or _loop.pid != os.getpid():  # a forked child starts its own
            _loop = _Loop()
        return _loop


def post(
    url: str,
    *,
    json: Any,
    headers: dict[str, str],
    timeout: float,
    cancelled: CancelSignal | None = None,
) -> httpx.Response:
    """POST and return the response (the body read), raising what ``httpx.post`` raises, or
    :class:`Abandoned` as soon as ``cancelled`` is set."""
    loop = _the_loop()
    call = loop.client.post(url, json=json, headers=headers, timeout=timeout)
    future: Future[httpx.Response] = asyncio.run_coroutine_threadsafe(call, loop.loop)
    if cancelled is None:
        return future.result()
    woken = threading.Event()
    future.add_done_callback(lambda _: woken.set())
    undo = cancelled.on_set(woken.set)
    try:
        woken.wait()
    finally:
        undo()
    if not future.done() and cancelled.is_set():
        future.cancel()
        raise Abandoned
    return future.result()
