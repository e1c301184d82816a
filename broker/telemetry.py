"""OpenTelemetry: one trace per run's chain, spans for policy layers and tool executions.

Enabled when an OTLP endpoint or exporter is configured through the standard ``OTEL_*``
environment variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_TRACES_EXPORTER``, ...), or
explicitly with an exporter (tests pass an in-memory one). The Celery instrumentation
propagates the W3C trace context through message headers, so planner -> policy -> tool ->
planner is one trace. A message published from outside the run's chain (the reconciler's
stalled-run sweep and retries, a confirmation, an answer) is published inside
:func:`run_context` of the run's recorded ``trace_id``, so the run stays one trace whoever
re-publishes it. Span attributes are controlled summaries: ids, tool names, outcomes and codes
— never argument values.

Each process reports its role as ``service.name`` (:data:`SERVICE_NAMES`); ``OTEL_SERVICE_NAME``,
if set, becomes ``service.namespace`` (the deployment) instead of renaming every role.
Exporting never holds a process up for long: the OTLP exporter's timeout is
:data:`EXPORT_TIMEOUT_S` unless ``OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT`` says otherwise, and the
flush at exit is bounded (a command-line client's by :data:`CLIENT_EXIT_FLUSH_S`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from warrant.runner.policy import LAYER_OF_EVENT

__all__ = [
    "CLIENT_EXIT_FLUSH_S",
    "EXPORT_TIMEOUT_S",
    "SERVICE_NAMES",
    "RunTracedPublisher",
    "configure",
    "enabled",
    "name_worker",
    "note",
    "resource_attributes",
    "run_context",
    "shutdown",
    "span",
    "tracer",
    "worker_service_name",
]

#: ``service.name`` of each role's processes.
SERVICE_NAMES = {
    "planner": "warrant-planner",
    "policy": "warrant-policy",
    "tool": "warrant-tool",
    "reconciler": "warrant-reconciler",
    "beat": "warrant-beat",
    "client": "warrant-client",
    "serve": "warrant-serve",
}
#: A worker whose queues span several roles (or all of them).
WORKER_SERVICE = "warrant-worker"

#: Seconds one OTLP export may take, retries included (the exporter's own default is 10 s, and
#: a process flushing at exit waited that long for a collector that is not there).
EXPORT_TIMEOUT_S = 2.0
#: Seconds a command-line client spends flushing its spans at exit: a collector on the same
#: network answers in milliseconds; a missing one must not make every command slower.
CLIENT_EXIT_FLUSH_S = 0.2

_PROVIDER: Any = None
_INSTRUMENTOR: Any = None
_AT_EXIT: Callable[[], None] | None = None
#: This worker's service name, chosen from its queues before the pool forks (see
#: :func:`name_worker`); replaces :data:`WORKER_SERVICE` in :func:`configure`.
_WORKER_NAME: str | None = None


def _wanted() -> bool:
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
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


def worker_service_name(queues: Iterable[str]) -> str:
    """The service name of a worker consuming ``queues``: its role's, if they are one role's
    (``tool.*`` queues are the tool role's), else :data:`WORKER_SERVICE`."""
    roles = {"tool" if q.startswith("tool.") else q for q in queues}
    if len(roles) == 1 and (role := roles.pop()) in SERVICE_NAMES:
        return SERVICE_NAMES[role]
    return WORKER_SERVICE


def name_worker(queues: Iterable[str] | None) -> None:
    """Name this worker process (and the pool processes it forks) after the role of the
    queues it consumes; ``None`` (every queue) keeps :data:`WORKER_SERVICE`."""
    global _WORKER_NAME
    _WORKER_NAME = worker_service_name(queues) if queues else None


def resource_attributes(service_name: str) -> dict[str, str]:
    """The role's own ``service.name``; ``OTEL_SERVICE_NAME`` (one value for every process
    of a deployment, as in the compose file) becomes ``service.namespace``."""
    attributes = {"service.name": service_name}
    namespace = os.environ.get("OTEL_SERVICE_NAME", "").strip()
    if namespace:
        attributes["service.namespace"] = namespace
    return attributes


def _otlp_exporter(timeout_s: float) -> Any:
    """The OTLP/HTTP exporter, ``timeout_s`` per export (retries included: a retry whose
    back-off does not fit in what is left is not made) unless the environment sets one."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    configured = any(
        os.environ.get(k)
        for k in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
    )
    return OTLPSpanExporter(timeout=None if configured else timeout_s)


def _exit_bound_s(exit_flush_s: float | None) -> float:
    """``OTEL_BSP_EXPORT_TIMEOUT`` (ms) if set, else ``exit_flush_s``, else a full export."""
    raw = os.environ.get("OTEL_BSP_EXPORT_TIMEOUT", "").strip()
    with contextlib.suppress(ValueError):
        if raw:
            return max(0.0, float(raw) / 1000)
    return exit_flush_s if exit_flush_s is not None else EXPORT_TIMEOUT_S + 1.0


def _bounded(call: Callable[[], Any], seconds: float) -> None:
    """Run ``call`` for at most ``seconds``; past that it goes on in a daemon thread, which
    an exiting process does not wait for (an export blocked on an unreachable collector)."""
    done = threading.Thread(target=call, name="warrant-otel-flush", daemon=True)
    done.start()
    done.join(seconds)


def configure(
    *,
    service_name: str = "warrant",
    exporter: Any = None,
    exit_flush_s: float | None = None,
) -> bool:
    """Set up tracing for this process (idempotent). Returns whether tracing is on.

    ``exit_flush_s`` (a short-lived client's) bounds the flush at interpreter exit and each
    export: a collector that refuses costs nothing (no retry fits), one that does not answer
    costs ``exit_flush_s`` once. By default an export may take :data:`EXPORT_TIMEOUT_S` and
    the exit flush one export. A worker process flushes in :func:`shutdown`."""
    global _PROVIDER, _INSTRUMENTOR, _AT_EXIT
    if _PROVIDER is not None:
        return True
    if exporter is None and not _wanted():
        return False
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if service_name == WORKER_SERVICE and _WORKER_NAME:
        service_name = _WORKER_NAME
    provider = TracerProvider(
        resource=Resource.create(resource_attributes(service_name)), shutdown_on_exit=False
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        timeout_s = EXPORT_TIMEOUT_S if exit_flush_s is None else exit_flush_s
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(timeout_s)))
    trace.set_tracer_provider(provider)
    _INSTRUMENTOR = CeleryInstrumentor()
    _INSTRUMENTOR.instrument(tracer_provider=provider)
    _PROVIDER = provider
    bound = _exit_bound_s(exit_flush_s)

    def flush_at_exit() -> None:
        _bounded(provider.shutdown, bound)

    _AT_EXIT = flush_at_exit
    atexit.register(flush_at_exit)
    return True


def shutdown() -> None:
    """Flush and stop (worker shutdown), for at most one export's timeout plus a second."""
    global _PROVIDER, _INSTRUMENTOR, _AT_EXIT
    if _INSTRUMENTOR is not None:
        _INSTRUMENTOR.uninstrument()
    if _AT_EXIT is not None:
        atexit.unregister(_AT_EXIT)
    provider = _PROVIDER
    if provider is not None:

        def flush_and_stop() -> None:
            provider.force_flush()
            provider.shutdown()

        _bounded(flush_and_stop, _exit_bound_s(None))
    _PROVIDER = _INSTRUMENTOR = _AT_EXIT = None


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


def note(name: str, **attributes: Any) -> None:
    """An event on the current span, with ``warrant.*`` attributes; a no-op when off."""
    if _PROVIDER is None:
        return
    attrs = {f"warrant.{k}": v for k, v in attributes.items() if v is not None}
    trace.get_current_span().add_event(name, attrs)


def current_trace_id() -> str | None:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


@contextlib.contextmanager
def run_context(trace_id: str | None) -> Iterator[None]:
    """Continue a run's trace from outside its chain (confirm, answer, the reconciler)."""
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


class RunTracedPublisher:
    """A publisher whose every stage message continues its run's trace (:func:`run_context`
    of ``trace_of(run_id)``), whatever trace the publishing code is in: the reconciler's
    sweep runs in a trace of its own, and a message it re-publishes (a stalled run, a retried
    command, an effect found applied) must not start the run's next stage in that one."""

    def __init__(self, publisher: Any, trace_of: Callable[[str], str | None]) -> None:
        self._publisher = publisher
        self._trace_of = trace_of

    def planner(self, run_id: str, version: int, *, countdown: float | None = None) -> None:
        with run_context(self._trace_of(run_id)):
            self._publisher.planner(run_id, version, countdown=countdown)

    def policy(self, run_id: str, version: int) -> None:
        with run_context(self._trace_of(run_id)):
            self._publisher.policy(run_id, version)

    def tool(self, *, run_id: str, **message: Any) -> None:
        with run_context(self._trace_of(run_id)):
            self._publisher.tool(run_id=run_id, **message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._publisher, name)


def layer_observer(**attributes: Any) -> Any:
    """An ``on_event`` for ``warrant.runner.policy.evaluate``: one span per gate layer, timed from
    the previous layer's end to this one's event."""
    if _PROVIDER is None:
        return None
    import time

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
