"""Tools as they really are (issue 33): a refund the payment service accepts and settles later,
and a batch payout whose items succeed or fail one by one — on real workers, a real
reconciler, Redis and PostgreSQL, against the demo service's own tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from warrant_demo import scenarios as sc

from tests import facts
from tests.conftest import JOB_QUEUES, RECONCILER_ENV, WorkerProcess, wait_for
from tests.integration.test_reconciler import settle, sweep_now
from tests.integration.test_tool_execution import refund, uid
from warrant.ledger import metrics
from warrant.ledger.db import session_scope
from warrant.ledger.models import Command, Observation, OutcomeRow, Reconciliation, Run
from warrant.tools._batches import item_token

pytestmark = [pytest.mark.services, pytest.mark.slow]

REFUND = {"capability": "payments:refund"}
PAYOUT = {"capability": "payments:payout"}


@pytest.fixture(scope="module")
def jobs_worker(worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This module's own tool worker for the long-running and batch tools (it is killed)."""
    log = tmp_path_factory.mktemp("logs") / "jobs.log"
    proc = WorkerProcess(list(JOB_QUEUES), name="jobs", concurrency=2, log=log)
    with proc.serving():
        yield proc


@pytest.fixture(scope="module")
def own_reconciler(
    worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """This module's reconciler (with its schedule): it is killed and started again."""
    log = tmp_path_factory.mktemp("logs") / "jobs-reconciler.log"
    proc = WorkerProcess(["reconciler"], name="jobsrec", concurrency=1, log=log, env=RECONCILER_ENV)
    with proc.serving():
        yield proc


@pytest.fixture(autouse=True)
def _clean_faults(demo):
    demo.clear_faults()
    yield
    demo.clear_faults()


def refund_async(order_id: str, pid: str = "p1") -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "refund_async",
        "tool_version": "1",
        "arguments": {"order_id": order_id, "amount_cents": 1200, "currency": "EUR"},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def payout_spec(tag: str, n: int) -> dict[str, Any]:
    """A run that pays ``n`` payees the goal names (payees only the model named would wait for
    a person: addresses in arguments must come from trusted text)."""
    spec = sc.spec([payouts(tag, n=n), sc.final("Paid.", "tool-1")], grants=[PAYOUT])
    payees = ", ".join(f"{tag}-{i}@example.com" for i in range(1, n + 1))
    return {**spec, "goal": f"Pay {payees} their payouts."}


def payouts(tag: str, n: int = 5, pid: str = "p1") -> dict[str, Any]:
    items = [
        {
            "payout_id": f"po_{tag}{i}",
            "recipient": f"{tag}-{i}@example.com",
            "amount_cents": 100 + i,
        }
        for i in range(1, n + 1)
    ]
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "payout_batch",
        "tool_version": "1",
        "arguments": {"payouts": items},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def order() -> str:
    return "ord_" + uid("j").replace("-", "")


def observation(engine, run_id: str, observation_id: str) -> dict[str, Any]:
    with session_scope(engine) as s:
        return s.scalars(
            select(Observation.content).where(
                Observation.run_id == run_id, Observation.observation_id == observation_id
            )
        ).one()


def stop_detail(engine, run_id: str) -> dict[str, Any]:
    with session_scope(engine) as s:
        return dict(s.get(Run, run_id).stop_detail or {})


def command_token(engine, run_id: str) -> str:
    with session_scope(engine) as s:
        return s.scalars(select(Command.idempotency_token).where(Command.run_id == run_id)).one()


def outcomes(engine, run_id: str) -> list[OutcomeRow]:
    with session_scope(engine) as s:
        found = s.scalars(
            select(OutcomeRow).where(OutcomeRow.run_id == run_id).order_by(OutcomeRow.id)
        ).all()
        s.expunge_all()
        return list(found)


def polls(engine, run_id: str) -> list[str]:
    with session_scope(engine) as s:
        return list(
            s.scalars(
                select(Reconciliation.result)
                .where(Reconciliation.run_id == run_id)
                .order_by(Reconciliation.id)
            )
        )


# --- accepted outcomes ------------------------------------------------------------------------


def test_an_accepted_refund_finishes_when_it_settles_across_a_worker_kill_and_a_reconciler_restart(
    engine, client, demo, jobs_worker, own_reconciler
):
    ord_id = order()
    demo.set_fault("refund_async", "slow_settle", delay_s=6.0)
    run_id = client.start_run(
        sc.spec([refund_async(ord_id), sc.final("Refunded.", "job-1")], grants=[REFUND])
    )
    assert client.wait(run_id, timeout=30, until={"waiting_job"}).status == "waiting_job"
    accepted = observation(engine, run_id, "tool-1")
    assert accepted["status"] == "accepted" and accepted["final"] is False
    assert accepted["operation_id"].startswith("rj_")
    assert [o.status for o in outcomes(engine, run_id)] == ["accepted"]
    assert run_id in [r.run_id for r in client.list_runs(status="waiting_job")]  # CLI, API, inbox
    with session_scope(engine) as s:  # what /metrics reports as warrant_runs{status=...}
        assert metrics.snapshot(s, stale_extra_s=1.0).runs_by_status["waiting_job"] >= 1
    wait_for(
        lambda: sweep_now(client) or "running" in polls(engine, run_id), timeout=20, what="a poll"
    )

    jobs_worker.kill_all()  # no worker holds the waiting run: killing them changes nothing
    own_reconciler.kill_all()  # nor does the reconciler (its state is the ledger's)
    jobs_worker.restart()
    own_reconciler.restart()

    info = settle(client, run_id, timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    final = observation(engine, run_id, "job-1")
    assert final["status"] == "succeeded" and final["final"] is True
    assert final["output"]["order_id"] == ord_id
    jobs = demo.refund_jobs_of(ord_id)
    assert [(j["status"], j["cancels"]) for j in jobs] == [("settled", 0)]
    assert [o.resolved_status for o in outcomes(engine, run_id)] == ["succeeded"]
    names = [e.event for e in facts.events(engine, run_id)]
    assert names.count("job.accepted") == 1 and names.count("job.settled") == 1
    assert ("running", "waiting_job") in [
        (e.details["from"], e.details["to"])
        for e in facts.events(engine, run_id, "state.transitioned")
    ]


def test_a_final_answer_may_not_cite_an_unfinished_job(
    engine, client, demo, jobs_worker, own_reconciler
):
    # The planner is asked again once the job has settled, and cites the acceptance, not the
    # end: refused (an observation says it was unfinished); its next answer cites the end.
    outputs = [refund_async(order()), sc.final("Refunded.", "tool-1"), sc.final("Done.", "job-1")]
    spec = sc.spec(outputs, grants=[REFUND], max_refused_finals=1)
    info = settle(client, client.start_run(spec), timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    refused = observation(engine, info.run_id, "policy-2")
    assert (refused["code"], refused["unfinished"]) == ("FINAL_CITATION_VALIDATION_FAILED", 1)


def test_a_run_cancelled_while_it_waits_calls_the_jobs_cancel_once(
    engine, client, demo, jobs_worker, own_reconciler
):
    ord_id = order()
    demo.set_fault("refund_async", "never_settle")
    run_id = client.start_run(
        sc.spec([refund_async(ord_id), sc.final("Refunded.", "job-1")], grants=[REFUND])
    )
    assert client.wait(run_id, timeout=30, until={"waiting_job"}).status == "waiting_job"
    assert client.cancel(run_id, by="ops", reason="customer withdrew").status == "cancelling"
    info = settle(client, run_id, timeout=30)
    assert (info.status, info.stop_reason) == ("cancelled", "CANCELLED"), info
    assert stop_detail(engine, run_id)["effect"] == "none"
    assert [(j["status"], j["cancels"]) for j in demo.refund_jobs_of(ord_id)] == [("cancelled", 1)]
    assert polls(engine, run_id).count("cancel_requested") == 1
    assert observation(engine, run_id, "job-1")["code"] == "REFUND_CANCELLED"


def test_a_job_that_fails_is_a_final_failure_the_planner_sees(
    engine, client, demo, jobs_worker, own_reconciler
):
    declined, second = order(), order()
    demo.set_fault("refund_async", "settle_fail")
    outputs = [refund_async(declined), refund_async(second, pid="p2"), sc.final("Done.", "job-2")]
    info = settle(client, client.start_run(sc.spec(outputs, grants=[REFUND])), timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    failed = observation(engine, info.run_id, "job-1")
    assert (failed["status"], failed["code"], failed["final"]) == (
        "failed",
        "REFUND_DECLINED",
        True,
    )
    assert [j["status"] for j in demo.refund_jobs_of(declined)] == ["failed"]
    assert [j["status"] for j in demo.refund_jobs_of(second)] == ["settled"]


def test_a_job_past_its_run_deadline_is_cancelled_and_the_run_ends(
    engine, client, demo, jobs_worker, own_reconciler
):
    ord_id = order()
    demo.set_fault("refund_async", "never_settle")
    spec = sc.spec([refund_async(ord_id), sc.final("Refunded.", "job-1")], grants=[REFUND])
    spec["budgets"]["deadline_s"] = 4
    info = settle(client, client.start_run(spec), timeout=40)
    assert (info.status, info.stop_reason) == ("failed", "DEADLINE_REACHED"), info
    assert [(j["status"], j["cancels"]) for j in demo.refund_jobs_of(ord_id)] == [("cancelled", 1)]
    assert observation(engine, info.run_id, "job-1")["code"] == "REFUND_CANCELLED"


def test_a_lost_acceptance_is_found_by_reconciliation_and_then_waited_for(
    engine, client, demo, jobs_worker, own_reconciler
):
    ord_id = order()
    demo.set_fault("refund_async", "timeout_after_commit")  # the job exists; its answer is lost
    spec = sc.spec([refund_async(ord_id), sc.final("Refunded.", "job-1")], grants=[REFUND])
    info = settle(client, client.start_run(spec), timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    assert [j["status"] for j in demo.refund_jobs_of(ord_id)] == ["settled"]  # one job
    (outcome,) = outcomes(engine, info.run_id)
    assert (outcome.status, outcome.code, outcome.resolved_status) == (
        "accepted",
        "SERVICE_TIMEOUT",
        "succeeded",
    )
    assert polls(engine, info.run_id)[0] == "applied"  # reconciliation found the job
    [accepted] = facts.events(engine, info.run_id, "job.accepted")
    assert accepted.details["found"] == "reconciliation"


# --- batches ----------------------------------------------------------------------------------


def test_a_batch_whose_two_items_fail_is_retried_for_those_two_and_pays_each_once(
    engine, client, demo, jobs_worker
):
    tag = uid("b").replace("-", "")
    demo.set_fault("payout_batch", "transient", times=2)
    spec = payout_spec(tag, 5)
    info = client.wait(client.start_run(spec), timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    assert [demo.payouts_to(f"{tag}-{i}@example.com") for i in range(1, 6)] == [1] * 5
    first, second = outcomes(engine, info.run_id)
    token = command_token(engine, info.run_id)
    calls = {i: demo.calls_with_key(item_token(token, f"po_{tag}{i}")) for i in range(1, 6)}
    assert sorted(calls.values()) == [1, 1, 1, 2, 2], calls  # the retry sent only the two
    assert (first.status, first.code, first.retryable) == ("failed", "BATCH_ITEMS_FAILED", True)
    assert [i["status"] for i in first.output["items"]].count("applied") == 3
    assert (second.status, second.attempt) == ("succeeded", 2)
    assert [i["status"] for i in second.output["items"]] == ["applied"] * 5
    retried = [i["key"] for i in first.output["items"] if i["status"] == "failed"]
    assert len(retried) == 2
    result = observation(engine, info.run_id, "tool-1")
    assert [i["key"] for i in result["output"]["items"]] == [f"po_{tag}{i}" for i in range(1, 6)]


def test_a_batch_item_with_an_unknown_effect_is_reconciled_item_by_item(
    engine, client, demo, jobs_worker, own_reconciler
):
    tag = uid("u").replace("-", "")
    demo.set_fault("payout_batch", "timeout_after_commit", times=1)
    spec = payout_spec(tag, 3)
    info = settle(client, client.start_run(spec), timeout=40)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED"), info
    assert [demo.payouts_to(f"{tag}-{i}@example.com") for i in range(1, 4)] == [1, 1, 1]
    (unknown,) = outcomes(engine, info.run_id)
    assert (unknown.status, unknown.code, unknown.resolved_status) == (
        "unknown",
        "BATCH_ITEMS_UNKNOWN",
        "applied",
    )
    assert polls(engine, info.run_id) == ["applied"]


# --- compensation -----------------------------------------------------------------------------


def test_a_refund_whose_read_back_disagrees_is_reversed_exactly_once(
    engine, client, demo, draft_worker
):
    ord_id = order()
    demo.set_fault("issue_refund", "corrupt_read", times=1)  # its one read-back disagrees
    spec = sc.spec([refund(ord_id), sc.final("Refunded.", "tool-1")], grants=[REFUND])
    info = client.wait(client.start_run(spec), timeout=30)
    assert (info.status, info.stop_reason) == ("failed", "TOOL_POSTCONDITION_FAILED"), info
    token = command_token(engine, info.run_id)
    assert demo.refund_count(order_id=ord_id) == 1  # made once...
    assert demo.reversals_of(key=token) == (1, 1)  # ...and reversed once, by one call
    [compensated] = facts.events(engine, info.run_id, "effect.compensated")
    assert (compensated.details["status"], compensated.details["code"]) == ("succeeded", None)
    (outcome,) = outcomes(engine, info.run_id)
    assert outcome.output["compensation"]["status"] == "succeeded"
    assert stop_detail(engine, info.run_id)["code"] == "TOOL_POSTCONDITION_FAILED"
