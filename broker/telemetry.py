"""OpenTelemetry: one trace per run's chain, spans for policy layers and tool executions.

Enabled when an OTLP endpoint or exporter is configured through the standard ``OTEL_*``
environment variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_TRACES_EXPORTER``, ...), or
explicitly with an exporter (tests pass an in-memory one). The Celery instrumentation
propagates the W3C trace context through message headers, so planner -> policy -> tool ->
planner is one trace. Span attributes are controlled summaries: ids, tool names, outcomes
and codes — never argument values.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

__all__ = ["configure", "enabled", "run_context", "shutdown", "span", "tracer"]

_PROVIDER: Any = None
_INSTRUMENTOR: Any = None


def _wanted() -> bool:
    return any(
        os.environ.get(k)
        for k in (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_TRACES_EXPORTER",
        )
    )


def enabled() -> bool:
    return _PROVIDER is not None


def configure(*, service_name: str = "warrant", exporter: Any = None) -> bool:
    """Set up tracing for this process (idempotent). Returns whether tracing is on."""
    global _PROVIDER, _INSTRUMENTOR
    if _PROVIDER is not None:
        return True
    if exporter is None and not _wanted():
        return False
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)}
        )
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _INSTRUMENTOR = CeleryInstrumentor()
    _INSTRUMENTOR.instrument(tracer_provider=provider)
    _PROVIDER = provider
    return True


def shutdown() -> None:
    """Flush and stop (worker shutdown)."""
    global _PROVIDER, _INSTRUMENTOR
    if _INSTRUMENTOR is not None:
        _INSTRUMENTOR.uninstrument()
    if _PROVIDER is not None:
        _PROVIDER.force_flush()
        _PROVIDER.shutdown()
    _PROVIDER = _INSTRUMENTOR = None


def tracer() -> trace.Tracer:
    return (_PROVIDER or trace.get_tracer_provider()).get_tracer("warrant")


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span with ``warrant.*`` attributes (None values skipped); a no-op when off."""
    if _PROVIDER is None:
        yield None
        return
    attrs = {f"warrant.{k}": v for k, v in attributes.items() if v is not None}
    with tracer().start_as_current_span(name, attributes=attrs) as current:
        yield current


def current_trace_id() -> str | None:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


@contextlib.contextmanager
def run_context(trace_id: str | None) -> Iterator[None]:
    """Continue a run's trace from outside its chain (confirm, cancel, reconciler)."""
    if _PROVIDER is None or not trace_id:
        yield
        return
    parent = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(trace_id[:16], 16) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(parent)))
    try:
        yield
    finally:
        otel_context.detach(token)


def layer_observer(**attributes: Any) -> Any:
    """An ``on_event`` for ``warrant.runner.policy.evaluate``: one span per gate layer, timed from
    the previous layer's end to this one's event."""
    if _PROVIDER is None:
        return None
    import time

    from warrant.runner.policy import LAYER_OF_EVENT

    attrs = {f"warrant.{k}": v for k, v in attributes.items() if v is not None}
    last = [time.time_ns()]

    def observe(event: Any) -> None:
        now = time.time_ns()
        layer = LAYER_OF_EVENT.get(event.name) or str(event.details.get("layer", event.name))
        extra = {"warrant.event": event.name}
        if event.details.get("code"):
            extra["warrant.code"] = str(event.details["code"])
        current = tracer().start_span(
            f"policy.{layer}", start_time=last[0], attributes={**attrs, **extra}
        )
        current.end(end_time=now)
        last[0] = now

    return observe
