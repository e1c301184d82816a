"""``/metrics``: the collector's Prometheus text equals what the ledger holds."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from warrant_demo import scenarios as sc

from tests import facts
from tests.approvals_tool import CAPABILITY as PAYMENTS
from tests.approvals_tool import proposal as pay_proposal
from tests.integration.test_gate_pipeline import CLARIFY, tool
from tests.integration.test_reconciler import NOTICES, notice
from tests.integration.test_tool_execution import REFUND, refund
from warrant.runner.codes import RunStatus
from warrant.runner.server.metrics import metrics_registry, metrics_response

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _rows(engine: Any, sql: str) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(text(sql)).all())


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_equal_the_ledger_counts(engine, run_to_end):
    run_to_end(sc.spec([sc.search("p1"), sc.final("Done.", "tool-1")]))
    run_to_end(sc.spec([tool("rm_rf", {}, f"p{i}") for i in range(10)]))

    body, content_type = metrics_response(engine)
    assert content_type.startswith("text/plain")
    got = _samples(body)
    assert all(name.startswith("warrant_") for name, _ in got)
    assert got[("warrant_ledger_up", ())] == 1

    by_status = dict(_rows(engine, "SELECT status, count(*) FROM runs GROUP BY status"))
    assert by_status.get("completed") and by_status.get("failed")
    for status in RunStatus:
        assert got[("warrant_runs", (("status", status.value),))] == by_status.get(status.value, 0)
    assert got[("warrant_confirmations_waiting", ())] == by_status.get("waiting_confirmation", 0)

    refusals = _rows(
        engine,
        "SELECT rejection_code, count(*) FROM proposals WHERE rejection_code IS NOT NULL "
        "GROUP BY rejection_code",
    )
    assert refusals
    for code, n in refusals:
        assert got[("warrant_gate_refusals_total", (("code", code),))] == n
    assert sum(v for (name, _), v in got.items() if name == "warrant_gate_refusals_total") == sum(
        n for _, n in refusals
    )

    outcomes = _rows(
        engine,
        "SELECT c.tool, o.status, count(*) FROM outcomes o JOIN commands c ON c.id = o.command_id "
        "GROUP BY c.tool, o.status",
    )
    assert any(t == "search_public" for t, _, _ in outcomes)
    for t, status, n in outcomes:
        assert got[("warrant_tool_outcomes_total", (("status", status), ("tool", t)))] == n

    latency = _rows(
        engine,
        "SELECT c.tool, count(*), sum(o.duration_ms), "
        "count(*) FILTER (WHERE o.duration_ms <= 1000) FROM outcomes o "
        "JOIN commands c ON c.id = o.command_id WHERE o.duration_ms IS NOT NULL GROUP BY c.tool",
    )
    assert latency
    for t, n, total_ms, under_1s in latency:
        key = (("tool", t),)
        assert got[("warrant_tool_duration_seconds_count", key)] == n
        assert got[("warrant_tool_duration_seconds_sum", key)] == pytest.approx(total_ms / 1000)
        bucket = "warrant_tool_duration_seconds_bucket"
        assert got[(bucket, (("le", "1.0"), ("tool", t)))] == under_1s
        assert got[(bucket, (("le", "+Inf"), ("tool", t)))] == n
        cumulative = [v for (name, labels), v in got.items() if name == bucket and key[0] in labels]
        assert cumulative == sorted(cumulative)

    [(unknown,)] = _rows(
        engine,
        "SELECT count(*) FROM outcomes o JOIN runs r ON r.id = o.run_id "
        "AND r.active_command_id = o.command_id WHERE r.status IN ('reconciling', 'cancelling') "
        "AND o.status = 'unknown' AND o.resolved_status IS NULL",
    )
    assert got[("warrant_reconciler_unknown_outcomes", ())] == unknown
    assert ("warrant_reconciler_stale_commands", ()) in got
    [(pending,)] = _rows(engine, "SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'")
    assert got[("warrant_webhook_deliveries_pending", ())] == pending


def test_the_registry_is_the_apps_own(engine):
    assert metrics_registry(engine) is metrics_registry(engine)
    assert metrics_registry(engine) is not REGISTRY
    assert b"warrant_runs" not in generate_latest(REGISTRY)


def test_an_unreadable_ledger_reports_down():
    from warrant.ledger.db import engine_for

    gone = engine_for("postgresql://nobody@127.0.0.1:1/none")
    body, _ = metrics_response(gone)
    assert _samples(body) == {("warrant_ledger_up", ()): 0.0}


def test_cost_declines_duplicates_stops_and_provenance_are_counted(
    engine, client, worker, demo, tmp_path
):
    """Each fact made on the real pipeline, then read back from the exposition: the cost runs
    spent, a person's decline, a duplicate effect the gate refused, stop reasons, a
    destination the provenance layer refused."""
    priced = sc.spec([sc.search("p1"), sc.final("Done.", "tool-1")])
    priced["planner"]["usage_per_call"] = {"cost": 0.25}
    order = f"ord_{uuid.uuid4().hex[:12]}"
    twice = sc.spec(
        [{**refund(order, pid="r1"), "tool": "refund_daily"},
         {**refund(order, pid="r2"), "tool": "refund_daily"}, CLARIFY],
        grants=[REFUND],
    )  # fmt: skip
    stranger = f"{uuid.uuid4().hex[:8]}@example.com"
    unnamed = sc.spec([notice(stranger), CLARIFY], grants=[NOTICES])
    ended = [client.start_run(s) for s in (priced, twice, unnamed)]
    for run_id in ended:
        client.wait(run_id, timeout=60)
    refunding = client.get_run(ended[1])  # a refund waits for a person: the first one is done
    assert refunding.status == "waiting_confirmation", refunding
    phash = refunding.confirmation_request["proposal_hash"]
    client.confirm(ended[1], proposal_hash=phash, by="ops")
    client.wait(ended[1], timeout=60)
    ledger = tmp_path / "payments"
    asked = client.start_run(
        sc.spec([pay_proposal(ledger, 500), CLARIFY], grants=[{"capability": PAYMENTS}])
    )
    waiting = client.wait(asked, timeout=30)
    assert waiting.status == "waiting_confirmation", waiting
    phash = waiting.confirmation_request["proposal_hash"]
    client.decline(asked, proposal_hash=phash, by="ops")
    client.wait(asked, timeout=30)
    assert facts.rejection_codes(engine, ended[1]) == ["DUPLICATE_EFFECT"]
    assert facts.rejection_codes(engine, ended[2]) == ["UNTRUSTED_DESTINATION"]

    got = _samples(metrics_response(engine)[0])

    [(cost,)] = _rows(engine, "SELECT coalesce(sum(cost_used), 0) FROM runs")
    assert got[("warrant_run_cost_total", ())] == pytest.approx(float(cost))
    assert float(cost) >= 0.25 * 2  # the priced run's two planner calls
    for reason, n in _rows(
        engine, "SELECT stop_reason, count(*) FROM runs WHERE stop_reason IS NOT NULL GROUP BY 1"
    ):
        assert got[("warrant_run_stops_total", (("stop_reason", reason),))] == n
    assert got[("warrant_run_stops_total", (("stop_reason", "CLARIFICATION_REQUIRED"),))] >= 3
    for tool_name, n in _rows(
        engine, "SELECT tool, count(*) FROM confirmations WHERE NOT approved GROUP BY tool"
    ):
        assert got[("warrant_confirmations_declined_total", (("tool", tool_name),))] == n
    assert got[("warrant_confirmations_declined_total", (("tool", "pay"),))] >= 1
    for tool_name, n in _rows(
        engine,
        "SELECT tool, count(*) FROM proposals WHERE rejection_code = 'DUPLICATE_EFFECT' "
        "GROUP BY tool",
    ):
        assert got[("warrant_duplicate_effects_prevented_total", (("tool", tool_name),))] == n
    assert got[("warrant_duplicate_effects_prevented_total", (("tool", "refund_daily"),))] >= 1
    for code, n in _rows(
        engine,
        "SELECT rejection_code, count(*) FROM proposals WHERE rejection_code IN "
        "('UNTRUSTED_CONTENT', 'UNTRUSTED_DESTINATION') GROUP BY 1",
    ):
        key = (("action", "refused"), ("code", code))
        assert got[("warrant_provenance_flags_total", key)] == n
    refused = (("action", "refused"), ("code", "UNTRUSTED_DESTINATION"))
    assert got[("warrant_provenance_flags_total", refused)] >= 1
    [(flagged,)] = _rows(
        engine,
        "SELECT count(*) FROM proposals WHERE jsonb_typeof(provenance -> 'flagged') = 'array' "
        "AND jsonb_array_length(provenance -> 'flagged') > 0",
    )
    asked_key = (("action", "asked"), ("code", "UNTRUSTED_ARGUMENT"))
    assert got.get(("warrant_provenance_flags_total", asked_key), 0) == flagged
