"""The demo plug-in's ``http_read``: a benchmark tool that waits on a real HTTP service (the
latency bench's fake tool service, ``python -m bench.latency``)."""

from __future__ import annotations

import threading
from typing import Any

from pydantic import Field

from warrant.tools import SideEffect, Tool, ToolContext, ToolInput, ToolOutput

__all__ = ["HTTP_READ", "HTTP_READ_URL_ENV"]


class HttpReadInput(ToolInput):
    n: int = Field(ge=0, le=10_000_000)
    """Any number (distinct per step, so loop detection sees progress)."""


#: Where ``http_read`` sends its GET (the benchmark's fake tool service on loopback).
HTTP_READ_URL_ENV = "WARRANT_DEMO_HTTP_READ_URL"


class HttpReadOutput(ToolOutput):
    n: int
    """The number, echoed."""
    status: int
    """The service's HTTP status."""
    chars: int
    """Length of the service's reply."""


class _Clients(threading.local):
    """The thread's HTTP client and the process it was made in (a fork makes its own)."""

    pid: int = 0
    client: Any = None


_CLIENTS = _Clients()
_SSL: dict[int, Any] = {}


def _client() -> Any:
    """The thread's client, kept (a keep-alive connection), on the process's one SSL context:
    ``httpx.get`` makes a client and an SSL context per call (tens of ms of CPU)."""
    import os

    import httpx

    pid = os.getpid()
    if _CLIENTS.pid != pid or _CLIENTS.client is None:
        context = _SSL.get(pid) or _SSL.setdefault(pid, httpx.create_ssl_context())
        _CLIENTS.pid, _CLIENTS.client = pid, httpx.Client(verify=context)
    return _CLIENTS.client


def _http_read(args: HttpReadInput, ctx: ToolContext) -> HttpReadOutput:
    import os

    url = os.environ.get(HTTP_READ_URL_ENV)
    if not url:
        raise RuntimeError(f"http_read: {HTTP_READ_URL_ENV} is not set")
    timeout = max(0.1, min(HTTP_READ.timeout_s, ctx.remaining_s()))
    response = _client().get(url, params={"n": args.n, "run": ctx.run_id}, timeout=timeout)
    response.raise_for_status()
    return HttpReadOutput(n=args.n, status=response.status_code, chars=len(response.text))


HTTP_READ: Tool[HttpReadInput, HttpReadOutput] = Tool(
    name="http_read",
    version="1",
    description="GET the URL in WARRANT_DEMO_HTTP_READ_URL (benchmarks: a tool that waits on"
    " a real HTTP service).",
    input_model=HttpReadInput,
    output_model=HttpReadOutput,
    capabilities=("bench:read",),
    side_effect=SideEffect.READ,
    execute=_http_read,
    timeout_s=15.0,
    resource=lambda args, subject: "bench",
)
