"""Model calls over one shared asynchronous HTTP client per process, waited on by the calling
thread, and abandoned at once when the run is cancelled.

Each planner thread used to open its own connection per call (``httpx.post``) and could only
wait for the answer. Here every call of the process goes through one ``aiohttp`` session on
one event-loop thread (connections are kept and reused), and the calling thread waits on the
call's completion or its run's cancel signal, whichever comes first: a cancel cancels the
request (its connection is closed), so the model stops being waited on within the run watch's
interval.

The session is ``aiohttp``'s, not ``httpx``'s (issue 52): with 100 calls in flight to a
loopback endpoint, an ``httpx.AsyncClient`` spent 4.5-5.7 ms of CPU per request (spread over
256 small pools, as this module did, 4.5-5.3 ms) and an ``aiohttp.ClientSession`` 0.3-0.5 ms;
a planner step makes one model call. Proxies come from the environment as they did
(``HTTPS_PROXY``, ``NO_PROXY``, ...), looked up once per endpoint: ``trust_env`` looked them
up, and for a ``.netrc``, on every request, in a thread of the loop's executor (a twentieth of
a planner's CPU)."""

from __future__ import annotations

import asyncio
import json as jsonlib
import os
import ssl
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import aiohttp
import certifi
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from warrant.runner.cancellation import CancelSignal
from warrant.runner.codes import ErrorCode
from warrant.runner.errors import WarrantError

__all__ = ["Abandoned", "ModelResponse", "post"]

#: Connections one process keeps to model endpoints (a planner process holds
#: ``WARRANT_PLANNER_CONCURRENCY`` calls at most).
MAX_CONNECTIONS = 1024


class Abandoned(WarrantError):
    """The run was cancelled while its model call was in flight; the request was cancelled."""

    code: str = ErrorCode.MODEL_CALL_ABANDONED

    def __init__(self) -> None:
        super().__init__("the run was cancelled while its model call was in flight")


@dataclass(frozen=True)
class ModelResponse:
    """An endpoint's answer, read whole."""

    status_code: int
    headers: dict[str, str]
    """Header names lower-cased."""
    content: bytes

    @property
    def body_text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (``ValueError`` if it is not; ``RecursionError`` past the parser's
        nesting limit)."""
        return jsonlib.loads(self.content)


class _Loop:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, name="warrant-model-http", daemon=True).start()
        self.ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._open())
        self.ready.set()
        self.loop.run_forever()

    async def _open(self) -> None:
        # one for all (each costs CPU and memory), with the CA bundle httpx used (certifi)
        context = ssl.create_default_context(cafile=certifi.where())
        connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0, ssl=context)
        self.session = aiohttp.ClientSession(connector=connector)
        self.proxies: dict[tuple[str, str | None, int | None], dict[str, Any]] = {}

    def _proxy(self, url: str) -> dict[str, Any]:
        """The environment's proxy for ``url``'s origin (none: ``{}``), looked up once."""
        parsed = URL(url)
        origin = (parsed.scheme, parsed.host, parsed.port)
        found = self.proxies.get(origin)
        if found is None:
            try:
                proxy, auth = get_env_proxy_for_url(parsed)
                found = {"proxy": proxy, "proxy_auth": auth}
            except LookupError:
                found = {}
            self.proxies[origin] = found
        return found

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout: float
    ) -> ModelResponse:
        try:
            async with self.session.post(
                url,
                data=body,
                headers={"Content-Type": "application/json", **headers},
                timeout=aiohttp.ClientTimeout(total=timeout),
                allow_redirects=False,  # a redirect is the endpoint's answer, as it was
                **self._proxy(url),
            ) as response:
                content = await response.read()
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError is one too
            raise TimeoutError(str(exc) or "timed out") from exc
        except aiohttp.ClientError as exc:  # refused, reset, closed mid-reply
            raise ConnectionError(str(exc) or type(exc).__name__) from exc
        found = {k.lower(): v for k, v in response.headers.items()}
        return ModelResponse(response.status, found, content)


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
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    cancelled: CancelSignal | None = None,
) -> ModelResponse:
    """POST ``body`` (JSON) and return the response (its body read), raising
    ``TimeoutError`` past ``timeout`` or ``ConnectionError`` when the connection fails or
    breaks, or :class:`Abandoned` as soon as ``cancelled`` is set."""
    loop = _the_loop()
    call = loop.post(url, body, headers, timeout)
    future: Future[ModelResponse] = asyncio.run_coroutine_threadsafe(call, loop.loop)
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
