"""The demo's document readers: the ``read_document`` tool and the document service it reads
from (a real HTTP service on loopback, with latency and fault injection per document).

The service answers ``GET /docs/<id>`` with the document's text. Each document can be set to
answer after ``delay_s``, to fail ``fail_times`` times first (``503``, ``Retry-After: 0``: the
tool's retryable failure), or to ``hang``: the request is read and never answered, so the
caller blocks in one socket read until the worker interrupts it (the seed's experiment 2:
"C never answers"). Every request is counted per document (``calls``).
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from warrant.runner.codes import ObservationSource
from warrant.runner.errors import ToolFailed
from warrant.tools import SideEffect, Tool, ToolContext, ToolInput, ToolOutput
from warrant.tools.blocking import http_client

__all__ = ["DOCS_URL_ENV", "READ_DOCUMENT", "DocumentService"]

#: Where ``read_document`` reads (the document service's root URL, on loopback).
DOCS_URL_ENV = "WARRANT_DEMO_DOCS_URL"


class DocumentInput(ToolInput):
    doc: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    """The document's id."""


class DocumentOutput(ToolOutput):
    doc: str
    """The document's id."""
    text: str
    """Its text (untrusted content)."""


def _read(args: DocumentInput, ctx: ToolContext) -> DocumentOutput:
    base = os.environ.get(DOCS_URL_ENV)
    if not base:
        raise ToolFailed(f"{DOCS_URL_ENV} is not set", code="DOCUMENTS_NOT_CONFIGURED")
    with http_client(ctx) as client:  # one blocking read, ended by the worker's interruption
        reply = client.get(f"{base.rstrip('/')}/docs/{args.doc}")
    if reply.status_code == 503:
        raise ToolFailed(
            "the document service is unavailable", code="DOCUMENT_UNAVAILABLE", retryable=True
        )
    if reply.status_code != 200:
        raise ToolFailed(f"no document {args.doc}", code="DOCUMENT_NOT_FOUND")
    return DocumentOutput(doc=args.doc, text=reply.json()["text"])


READ_DOCUMENT: Tool[DocumentInput, DocumentOutput] = Tool(
    name="read_document",
    version="1",
    description="Read one document by its id from the document service.",
    input_model=DocumentInput,
    output_model=DocumentOutput,
    capabilities=("docs:read",),
    side_effect=SideEffect.READ,
    output_source=ObservationSource.UNTRUSTED_CONTENT,
    execute=_read,
    timeout_s=30.0,
    max_attempts=3,
    retry_base_s=0.05,
    resource=lambda args, subject: f"doc:{args.doc}",
)


@dataclass
class _Behaviour:
    text: str
    delay_s: float = 0.0
    fail_times: int = 0
    hang: bool = False


class DocumentService:
    """The document service: ``with DocumentService() as docs: docs.url``; ``docs.set(...)``
    decides how each document answers, ``docs.calls`` counts its requests."""

    def __init__(self) -> None:
        self._docs: dict[str, _Behaviour] = {}
        self._lock = threading.Lock()
        self._released = threading.Event()
        self.calls: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        """The most requests it answered at the same time, hung ones apart (a test may reset
        it to 0)."""
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def set(
        self,
        doc: str,
        text: str = "",
        *,
        delay_s: float = 0.0,
        fail_times: int = 0,
        hang: bool = False,
    ) -> None:
        with self._lock:
            self._docs[doc] = _Behaviour(text or f"the text of {doc}", delay_s, fail_times, hang)

    def _serve(self, request: http.server.BaseHTTPRequestHandler) -> None:
        doc = request.path.rsplit("/", 1)[-1]
        with self._lock:
            self.calls[doc] = self.calls.get(doc, 0) + 1
            behaviour = self._docs.get(doc)
            failing = behaviour is not None and behaviour.fail_times > 0
            if failing:
                assert behaviour is not None
                behaviour.fail_times -= 1
        if behaviour is None:
            request.send_error(404)
            return
        if behaviour.hang:  # read, never answered: the caller blocks in one socket read
            self._released.wait()
            return
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._answer(request, doc, behaviour, failing)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _answer(
        self,
        request: http.server.BaseHTTPRequestHandler,
        doc: str,
        behaviour: _Behaviour,
        failing: bool,
    ) -> None:
        if behaviour.delay_s:
            time.sleep(behaviour.delay_s)
        if failing:
            request.send_response(503)
            request.send_header("Retry-After", "0")
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        body = json.dumps({"doc": doc, "text": behaviour.text}).encode()
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def __enter__(self) -> DocumentService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
