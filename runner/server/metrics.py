"""``/metrics``: the ledger's figures in the Prometheus text format.

A custom collector reads one snapshot of the ledger per scrape
(:func:`warrant.ledger.metrics.snapshot`) into its own :class:`CollectorRegistry` (one per
engine, never the process-global registry). The HTTP layer serves :func:`metrics_response`.

Metrics (all ``warrant_``):

* ``warrant_runs{status}``: runs by status (every status, 0 included);
* ``warrant_gate_refusals_total{code}``: proposals the gate refused, by rejection code;
* ``warrant_gate_would_refuse_total{code,tool}``: refusals observe mode let through;
* ``warrant_duplicate_effects_prevented_total{tool}``: calls refused ``DUPLICATE_EFFECT``;
* ``warrant_provenance_flags_total{code,action}``: calls the provenance layer refused
  (``refused``: ``UNTRUSTED_CONTENT``, ``UNTRUSTED_DESTINATION``) or flagged and sent to a
  person (``asked``: ``UNTRUSTED_ARGUMENT``);
* ``warrant_confirmations_declined_total{tool}``: confirmations a person declined;
* ``warrant_run_stops_total{stop_reason}``: runs by stop reason;
* ``warrant_run_cost_total``: what every run spent (model and tool calls), in the cost unit;
* ``warrant_tool_outcomes_total{tool,status}``: recorded tool outcomes;
* ``warrant_tool_duration_seconds{tool}``: histogram of the outcomes' measured durations;
* ``warrant_confirmations_waiting``: runs waiting for a person's confirmation;
* ``warrant_reconciler_unknown_outcomes``, ``warrant_reconciler_stale_commands``: the
  reconciler's backlog (unresolved unknown effects; started commands presumed lost);
* ``warrant_webhook_deliveries_pending``: webhook calls not yet delivered nor given up;
* ``warrant_ledger_up``: 1, or 0 when the ledger could not be read (then nothing else).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from warrant.broker.transitions import HARD_LIMIT_GRACE_S
from warrant.ledger.db import session_scope
from warrant.ledger.metrics import LATENCY_BUCKETS_MS, LedgerMetrics, snapshot
from warrant.runner.codes import RunStatus
from warrant.runner.settings import WarrantSettings, load_settings

__all__ = ["LedgerCollector", "metrics_registry", "metrics_response"]

log = logging.getLogger("warrant.metrics")

_REGISTRIES: weakref.WeakKeyDictionary[Engine, CollectorRegistry] = weakref.WeakKeyDictionary()


class LedgerCollector:
    """Reads the ledger at each scrape (no state of its own, so any number of API processes
    report the same figures)."""

    def __init__(self, engine: Engine, *, settings: WarrantSettings | None = None) -> None:
        self.engine = engine
        settings = settings or load_settings()
        self.stale_extra_s = settings.lease_margin_s + HARD_LIMIT_GRACE_S

    def describe(self) -> list[Metric]:
        """Nothing at registration (describing would read the ledger)."""
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            with session_scope(self.engine) as s:
                m = snapshot(s, stale_extra_s=self.stale_extra_s)
        except SQLAlchemyError:
            log.warning("metrics: the ledger could not be read", exc_info=True)
            yield _gauge("warrant_ledger_up", "Whether the ledger could be read.", 0)
            return
        yield _gauge("warrant_ledger_up", "Whether the ledger could be read.", 1)
        yield from _families(m)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, labels: list[str], counts: dict[Any, int]) -> Metric:
    """A counter family of ``counts``, keyed by a label's value or a tuple of them."""
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, n in sorted(counts.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], n)
    return family


def _routes(m: LedgerMetrics) -> Iterator[Metric]:
    """Routing (planner kind ``router``): routes, misroutes of evaluation runs, questions."""
    yield _counter(
        "warrant_routes",
        "Branches router runs started, by label, who decided (model, person, fallback) and"
        " whether the branch is high-risk.",
        ["label", "by", "high_risk"],
        m.routes,
    )
    yield _counter(
        "warrant_route_misroutes",
        "Routes of evaluation runs (expected_label) into another branch; high_risk: the branch"
        " routed into.",
        ["expected", "routed", "high_risk"],
        m.misroutes,
    )
    yield _gauge(
        "warrant_route_person_asked",
        "Router runs' questions to a person (unknown, not a label, or under the floor).",
        m.routes_asked,
    )


def _safety(m: LedgerMetrics) -> Iterator[Metric]:
    """What the gate and people stopped, how runs ended and what they cost."""
    yield _counter(
        "warrant_duplicate_effects_prevented",
        "Calls refused DUPLICATE_EFFECT (the same business effect not done twice), by tool.",
        ["tool"],
        m.duplicates,
    )
    yield _counter(
        "warrant_provenance_flags",
        "Calls the provenance layer refused (action refused) or flagged and sent to a person"
        " (action asked), by code.",
        ["code", "action"],
        m.provenance,
    )
    yield _counter(
        "warrant_confirmations_declined",
        "Confirmations a person declined, by tool.",
        ["tool"],
        m.declined,
    )
    yield _counter("warrant_run_stops", "Runs by stop reason.", ["stop_reason"], m.stop_reasons)
    yield CounterMetricFamily(
        "warrant_run_cost",
        "What every run spent (model and tool calls), in the runs' cost unit.",
        value=m.cost,
    )


def _families(m: LedgerMetrics) -> Iterator[Metric]:
    runs = GaugeMetricFamily("warrant_runs", "Runs by status.", labels=["status"])
    for status in RunStatus:
        runs.add_metric([status.value], m.runs_by_status.get(status.value, 0))
    yield runs
    yield _counter(
        "warrant_gate_refusals",
        "Proposals the gate refused, by rejection code.",
        ["code"],
        m.refusals_by_code,
    )
    yield _counter(
        "warrant_gate_would_refuse",
        "Refusals observe mode let through (gate.would_refuse), by code and tool.",
        ["code", "tool"],
        m.would_refuse,
    )
    yield _counter(
        "warrant_tool_outcomes", "Recorded tool outcomes.", ["tool", "status"], m.outcomes
    )
    yield from _routes(m)
    yield from _safety(m)
    latency = HistogramMetricFamily(
        "warrant_tool_duration_seconds", "Measured durations of tool calls.", labels=["tool"]
    )
    for tool, lat in sorted(m.latency.items()):
        bounds = [
            (repr(ms / 1000), count)
            for ms, count in zip(LATENCY_BUCKETS_MS, lat.buckets, strict=True)
        ]
        latency.add_metric([tool], [*bounds, ("+Inf", lat.count)], lat.sum_ms / 1000)
    yield latency
    for name, doc, value in (
        (
            "warrant_confirmations_waiting",
            "Runs waiting for a person's confirmation.",
            m.confirmations_waiting,
        ),
        (
            "warrant_reconciler_unknown_outcomes",
            "Unresolved unknown tool effects the reconciler works on.",
            m.unknown_outcomes,
        ),
        (
            "warrant_reconciler_stale_commands",
            "Started commands past their time limit and lease margin (presumed lost).",
            m.stale_commands,
        ),
        (
            "warrant_webhook_deliveries_pending",
            "Webhook calls not yet delivered nor given up.",
            m.webhooks_pending,
        ),
    ):
        yield _gauge(name, doc, value)


def metrics_registry(
    engine: Engine, *, settings: WarrantSettings | None = None
) -> CollectorRegistry:
    """The registry of ``engine``'s ledger collector (created once per engine)."""
    registry = _REGISTRIES.get(engine)
    if registry is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(LedgerCollector(engine, settings=settings))
        _REGISTRIES[engine] = registry
    return registry


def metrics_response(engine: Engine) -> tuple[bytes, str]:
    """The ``/metrics`` body and its content type."""
    return generate_latest(metrics_registry(engine)), CONTENT_TYPE_LATEST
