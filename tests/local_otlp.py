"""A local OTLP/HTTP trace receiver on 127.0.0.1 (a real HTTP server, for tests).

Accepts ``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest`` body (what the
OpenTelemetry SDK's OTLP/HTTP exporter sends; gzip or deflate bodies too), answers with an
empty ``ExportTraceServiceResponse``, and keeps every span with its resource's attributes, so
a test can assert which process (``service.name``) sent which span of which trace.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["LocalOTLP", "ReceivedSpan"]


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    """32 hex digits, as the ledger's ``runs.trace_id``."""
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def service(self) -> str | None:
        return self.resource.get("service.name")


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest``, each with its resource's attributes."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        attributes=_attributes(s.attributes),
                        resource=resource,
                    )
                )
    return spans


class LocalOTLP:
    """``with LocalOTLP() as otlp:`` — point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at
    :attr:`endpoint`; :meth:`spans` returns what arrived so far."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self.requests = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                encoding = (self.headers.get("content-encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path.rstrip("/") != "/v1/traces":
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                try:
                    spans = decode(body)
                except Exception:  # not an ExportTraceServiceRequest
                    self.send_response(400)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                with receiver.lock:
                    receiver._spans.extend(spans)
                    receiver.requests += 1
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter adds /v1/traces)."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def spans(self, **where: Any) -> list[ReceivedSpan]:
        """The spans received so far; ``where`` filters on span attributes
        (``run_id=...`` means ``warrant.run_id``)."""
        with self.lock:
            spans = list(self._spans)
        return [
            s for s in spans if all(s.attributes.get(f"warrant.{k}") == v for k, v in where.items())
        ]

    def __enter__(self) -> LocalOTLP:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
