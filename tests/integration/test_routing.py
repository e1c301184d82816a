"""Routing (issue 53, 001 §2.2 and its experiment 1): a router run's classifier names a label,
the program maps it to a fixed branch (a sub-run). On real workers, a real reconciler, Redis
and PostgreSQL; the classifier is a script (the LLM is outside the product), the payment
service the demo's. Assertions are on the ledger, the demo service and ``/metrics``'s figures."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests.integration.test_reconciler import sweep_now
from tests.integration.test_tool_execution import lookup, refund, uid
from warrant.ledger import metrics
from warrant.ledger.db import session_scope
from warrant.ledger.models import Run
from warrant.runner.errors import SpecError

pytestmark = [pytest.mark.services, pytest.mark.slow]

LOOKUP = {"capability": "lookup:read"}
DELEGATE = {"capability": "runs:delegate"}
SETTLED = ("completed", "failed", "cancelled", "handoff", "needs_input")


def branches(order: str) -> dict[str, Any]:
    reader = {
        "planner": {"kind": "fixture", "outputs": [lookup(), sc.final("Explained.", "tool-1")]},
        "grants": [LOOKUP],
        "budgets": {"max_refused_finals": 0, "max_tool_calls": 1},
    }
    return {
        "billing_faq": reader,
        "technical": reader,
        "account": reader,
        "refund": {
            "planner": {"kind": "fixture", "outputs": [refund(order), sc.final("Done.", "tool-1")]},
            "grants": [{"capability": "payments:refund", "resource_scope": f"order:{order}"}],
            "budgets": {"max_refused_finals": 0, "max_tool_calls": 1},
            "high_risk": True,
        },
    }


def router(
    request: str, label: str, confidence: float, *, expected: str | None, order: str, **over
) -> dict[str, Any]:
    return {
        "goal": request,
        "subject": "demo-user",
        "planner": {
            "kind": "router",
            "classifier": {
                "kind": "fixture",
                "outputs": [{"label": label, "confidence": confidence}],
            },
            "routes": branches(order),
            "expected_label": expected,
            **over,
        },
        "grants": [
            LOOKUP,
            {"capability": "payments:refund", "resource_scope": f"order:{order}"},
            DELEGATE,
        ],
        "budgets": {"max_refused_finals": 0},
    }


def snapshot(engine) -> metrics.LedgerMetrics:
    with session_scope(engine) as s:
        return metrics.snapshot(s, stale_extra_s=60)


def delta(after: dict, before: dict) -> dict:
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


def settle_all(client, engine, run_ids: list[str], *, timeout: float = 120.0) -> dict[str, Any]:
    """Sweep (the job polls) until every run has ended, waits for a person, or waits on a
    branch that waits for a person's confirmation (a deadline, not a sleep-and-hope)."""
    end = time.monotonic() + timeout
    while True:
        infos = {r: client.get_run(r) for r in run_ids}
        pending = [i for i in infos.values() if not _resting(engine, i)]
        if not pending:
            return infos
        assert time.monotonic() < end, f"runs stuck: {[(i.run_id, i.status) for i in pending]}"
        sweep_now(client)
        client.wait(pending[0].run_id, timeout=0.5, until=set(SETTLED))


def _resting(engine, info: Any) -> bool:
    if info.status in SETTLED:
        return True
    kids = children(engine, info.run_id) if info.status == "waiting_job" else []
    return bool(kids) and all(k.status == "waiting_confirmation" for k in kids)


def children(engine, run_id: str) -> list[Run]:
    with session_scope(engine) as s:
        return list(s.scalars(select(Run).where(Run.parent_run_id == run_id)))


def test_experiment_1_route_drift(engine, client, worker, reconciler_worker, demo):
    """20 labelled requests: 5 refunds, 5 billing explanations, 5 technical, 5 account. The
    router labels one low-confidence refund request ``billing_faq``, and one billing request
    ``refund``. The low-confidence one goes to a person and reaches no write tool; the misroute
    into the high-risk branch is counted on its own; every other request runs its branch."""
    order = "ord_" + uid("r").replace("-", "")
    truth = [("refund", f"Refund order {order}, please.")] * 5
    truth += [("billing_faq", "Why was I charged twice?")] * 5
    truth += [("technical", "The app crashes on start.")] * 5
    truth += [("account", "How do I change my e-mail?")] * 5
    said = [(label, 0.95) for label, _ in truth]
    said[0] = ("billing_faq", 0.4)  # the experiment's low-confidence refund
    said[5] = ("refund", 0.9)  # a billing question routed into the high-risk branch
    before = snapshot(engine)
    run_ids = [
        client.start_run(router(text, label, conf, expected=expected, order=order))
        for (expected, text), (label, conf) in zip(truth, said, strict=True)
    ]
    infos = settle_all(client, engine, run_ids)

    # the low-confidence refund: a person is asked which label fits; no branch, no write
    low = infos[run_ids[0]]
    assert (low.status, low.stop_reason) == ("needs_input", "CLARIFICATION_REQUIRED")
    assert children(engine, run_ids[0]) == []
    # the readers' branches ran and their answer is the router run's answer
    for run_id in run_ids[10:]:
        assert (infos[run_id].status, infos[run_id].answer) == ("completed", "Explained."), run_id
    # refunds (and the misrouted billing question) wait for a person's confirmation in the
    # refund branch: nothing was refunded
    misrouted = children(engine, run_ids[5])
    assert [c.status for c in misrouted] == ["waiting_confirmation"]
    assert demo.refund_count(order_id=order) == 0
    # the person asked sees whose request it serves: the parent's goal and the route taken
    [asked] = [
        p
        for p in client.pending_confirmations(reveal_sensitive=False)
        if p.run_id == misrouted[0].id
    ]
    assert asked.tool == "issue_refund"
    assert asked.parent["goal"] == "Why was I charged twice?"
    assert (asked.parent["run_id"], asked.parent["route"]["label"]) == (run_ids[5], "refund")
    # run show names the branch on the router run's side, and the router on the branch's
    shown = client.get_run(run_ids[5])
    assert [(c["run_id"], c["route"]["label"]) for c in shown.children] == [
        (misrouted[0].id, "refund")
    ]
    assert client.get_run(misrouted[0].id).parent_run_id == run_ids[5]

    after = snapshot(engine)
    assert delta(after.misroutes, before.misroutes) == {("billing_faq", "refund", "true"): 1}
    routes = delta(after.routes, before.routes)
    assert routes == {
        ("refund", "model", "true"): 5,  # four refunds and the misrouted billing question
        ("billing_faq", "model", "false"): 4,
        ("technical", "model", "false"): 5,
        ("account", "model", "false"): 5,
    }
    assert after.routes_asked - before.routes_asked == 1

    # the person classifies the low-confidence request: its branch starts (still no write
    # without a confirmation)
    client.answer(run_ids[0], text="refund", by="operator")
    settle_all(client, engine, [run_ids[0]])
    [branch] = children(engine, run_ids[0])
    assert branch.delegation["route"]["by"] == "person"
    assert demo.refund_count(order_id=order) == 0
    for run_id in run_ids:
        if client.get_run(run_id).status not in ("completed", "failed", "cancelled"):
            client.cancel(run_id, by="test")


def test_unknown_and_labels_outside_the_set_never_fall_into_the_nearest_branch(
    engine, client, worker, reconciler_worker, demo
):
    order = "ord_" + uid("u").replace("-", "")
    unknown = client.start_run(router("Hm.", "unknown", 0.99, expected=None, order=order))
    outside = client.start_run(router("Hm!", "refunds", 0.99, expected=None, order=order))
    fallback = client.start_run(
        router("Hmm.", "unknown", 0.99, expected=None, order=order, fallback="billing_faq")
    )
    infos = settle_all(client, engine, [unknown, outside, fallback])
    for run_id in (unknown, outside):
        assert infos[run_id].status == "needs_input" and children(engine, run_id) == []
    [read] = children(engine, fallback)
    assert read.delegation["route"]["by"] == "fallback"
    assert read.delegation["route"]["proposed"] == "unknown"
    assert infos[fallback].status == "completed"
    for run_id in (unknown, outside):
        client.cancel(run_id, by="test")


def test_a_fallback_branch_that_could_write_is_refused_at_start(client):
    spec = router("x", "unknown", 0.1, expected=None, order="ord_x", fallback="refund")
    with pytest.raises(SpecError) as caught:
        client.start_run(spec)
    assert caught.value.code == "SPEC_INVALID"
    assert "issue_refund@1" in str(caught.value)


def test_a_router_run_can_start_no_other_sub_run_than_its_branches(engine, client, worker, demo):
    """A forged ``delegate`` call from a router run (not its fixed branch) is refused at the
    spawn, and a run that is no router may not carry a route."""
    from warrant.ledger.delegation import SubRuns
    from warrant.tools._builtin import DelegateInput

    order = "ord_" + uid("f").replace("-", "")
    wide = {
        "goal": "x",
        "planner": {"kind": "fixture", "outputs": []},
        "grants": [LOOKUP],
        "route": {"label": "billing_faq"},
    }
    run_id = client.start_run(router("x", "unknown", 0.1, expected=None, order=order))
    with pytest.raises(Exception) as caught:
        SubRuns(engine).spawn(
            parent_run_id=run_id,
            command_id="c",
            token=uid("t"),
            request=DelegateInput.model_validate(wide),
        )
    assert getattr(caught.value, "code", None) == "PROPOSAL_INVALID"
    assert children(engine, run_id) == []
    client.cancel(run_id, by="test")
