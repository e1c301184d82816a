"""The producer host's side of a round: start refund runs, say when writes are in flight, wait
for the runs to settle, check the ledger against the demo service.

    python -m bench.chaos_hosts.driver --runs N --slow S --bound B

Runs inside the lab's ``producer`` namespace (its broker and ledger are on ``infra``). Prints
``started <n>`` and ``inflight <n>`` lines as the round goes, then one JSON document: the
checker's counts (``bench.chaos.checker``), the runs not settled within ``--bound`` seconds,
the spurious handoffs, and the attempts that outlived their lease (an effect committed later
than its call's start plus the tool's time limit, the hard-limit grace and the lease margin).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from typing import Any

from sqlalchemy import Engine, text

__all__ = ["main"]

#: Where a round's run may end. Waiting for a person counts as not settled: nobody answers.
SETTLED = ("completed", "failed", "cancelled", "handoff")


def refund_spec(tag: str, *, version: str = "1", parallel: bool = False) -> dict[str, Any]:
    """A run that refunds one order, or (``parallel``) two in one parallel step (two
    commands, two tokens, on whichever tool hosts take them)."""
    from warrant_demo import scenarios as sc

    def refund(order: str, pid: str) -> dict[str, Any]:
        return {
            "kind": "tool",
            "proposal_id": pid,
            "tool": "issue_refund",
            "tool_version": version,
            "arguments": {"order_id": order, "amount_cents": 1234, "currency": "EUR"},
            "reason_summary": "chaos-hosts",
            "source_observation_ids": ["user-1"],
        }

    if parallel:
        calls = [refund(f"ord_{tag}a", "p1a"), refund(f"ord_{tag}b", "p1b")]
        step = {"kind": "parallel", "proposal_id": "p1", "calls": calls, "merge": "all"}
        final = sc.final("Refunded both.", "tool-1.1", "tool-1.2")
    else:
        step, final = refund(f"ord_{tag}", "p1"), sc.final("Refunded.", "tool-1")
    # A lost attempt's retry is a tool call: a lone refund has room for three, so has each of
    # a pair (the default budget of 4 would end a pair's run after its second retry).
    spec = sc.spec([step, final], max_tool_calls=8 if parallel else 4)
    spec["grants"] = [{"capability": "payments:refund"}]
    spec["subject"] = f"hosts-{tag}"
    return spec


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _statuses(engine: Engine, ids: list[str]) -> dict[str, str]:
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT id, status FROM runs WHERE id = ANY(:ids)"), {"ids": ids}
            ).all()
    except Exception:  # the ledger may be cut off from this host for a moment
        return {}
    return {r[0]: r[1] for r in rows}


def _in_flight(engine: Engine, ids: list[str]) -> list[str]:
    """The workers (``node/process``) holding a started attempt of these runs."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT worker FROM commands WHERE run_id = ANY(:ids) AND status = 'started'"),
                {"ids": ids},
            ).all()
    except Exception:
        return []
    return [r[0] or "?" for r in rows]


def outlived_leases(engine: Engine, ids: list[str], *, margin_s: float) -> list[dict[str, Any]]:
    """Effects committed after the lease of the call that made them had ended."""
    from warrant.broker.transitions import HARD_LIMIT_GRACE_S

    query = text(
        """
        SELECT r.idempotency_key, r.created_at AS effect_at, c.timeout_s,
               (SELECT max(k.created_at) FROM demo_calls k
                 WHERE k.idempotency_key = r.idempotency_key AND k.created_at <= r.created_at)
               AS call_at
        FROM demo_refunds r JOIN commands c ON c.idempotency_token = r.idempotency_key
        WHERE c.run_id = ANY(:ids)
        """
    )
    with engine.connect() as conn:
        rows = conn.execute(query, {"ids": ids}).all()
    found = []
    for key, effect_at, timeout_s, call_at in rows:
        if call_at is None:
            continue
        ran = (effect_at - call_at).total_seconds()
        if ran > timeout_s + HARD_LIMIT_GRACE_S + margin_s:
            found.append({"token": key[:16], "ran_s": round(ran, 1)})
    return found


def run_round(args: argparse.Namespace) -> dict[str, Any]:
    from warrant_demo.service import DemoService

    from bench.chaos.checker import check
    from warrant.ledger.db import engine_for
    from warrant.runner.client.api import Client
    from warrant.runner.settings import WarrantSettings, resolved_urls

    _, database = resolved_urls()
    engine = engine_for(database)
    demo = DemoService(engine)
    demo.set_fault("issue_refund", "slow", times=2 * args.runs, delay_s=args.slow)
    client = Client.from_env()
    ids = []
    versions = args.versions.split(",")
    for n in range(args.runs):
        version = versions[n % len(versions)]
        pair = args.parallel and n % 2 == 1  # every other run: two refunds in one step
        ids.append(
            client.start_run(refund_spec(uuid.uuid4().hex[:12], version=version, parallel=pair))
        )
    _say(f"started {len(ids)}")
    t0 = time.monotonic()
    said_in_flight = False
    settled_at: dict[str, float] = {}
    while time.monotonic() - t0 < args.bound:
        if not said_in_flight and (holders := _in_flight(engine, ids)):
            _say(f"inflight {len(holders)} {' '.join(holders)}")
            said_in_flight = True
        now = time.monotonic() - t0
        for run_id, status in _statuses(engine, ids).items():
            if status in SETTLED:
                settled_at.setdefault(run_id, now)
        if len(settled_at) == len(ids):
            break
        time.sleep(0.25)
    if not said_in_flight:  # the fault still comes, but it hit no write: the round says so
        _say("inflight 0")
    statuses = _statuses(engine, ids)
    report = check(engine)
    with engine.connect() as conn:
        ends = conn.execute(
            text(
                "SELECT r.status, r.stop_reason, "
                "(SELECT string_agg(o.status || ':' || coalesce(o.code, '-'), ',' ORDER BY o.id) "
                " FROM outcomes o WHERE o.run_id = r.id) "
                "FROM runs r WHERE r.id = ANY(:ids) AND r.status <> 'completed'"
            ),
            {"ids": ids},
        ).all()
    with engine.connect() as conn:
        redirected = conn.execute(
            text(
                "SELECT count(*) FROM trace_events "
                "WHERE run_id = ANY(:ids) AND event = 'tool.delivery.redirected'"
            ),
            {"ids": ids},
        ).scalar_one()
    counts = report.to_dict()["counts"]
    margin = WarrantSettings().lease_margin_s
    return {
        "runs": len(ids),
        "lost": counts.get("lost", 0),
        "duplicated": counts.get("duplicated", 0),
        "unexpected": counts.get("unexpected", 0),
        "unresolved": counts.get("unresolved", 0),
        "spurious_handoffs": sum(1 for s in statuses.values() if s == "handoff"),
        "unsettled": len(ids) - len(settled_at),
        "outlived_lease": len(outlived_leases(engine, ids, margin_s=margin)),
        "failed": sum(1 for s in statuses.values() if s in ("failed", "cancelled")),
        "completed": sum(1 for s in statuses.values() if s == "completed"),
        "write_in_flight": said_in_flight,
        "redirected": redirected,
        "settle_max_s": round(max(settled_at.values()), 1) if settled_at else None,
        "not_completed": [{"status": e[0], "stop_reason": e[1], "outcomes": e[2]} for e in ends],
        "findings": [f for f in report.to_dict()["findings"] if f["category"] != "handoffs"][:10],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos_hosts.driver")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--slow", type=float, default=3.0, help="seconds each refund call takes")
    ap.add_argument("--bound", type=float, default=120.0, help="seconds the runs may take")
    ap.add_argument("--versions", default="1", help="issue_refund versions, in turn (1,2)")
    ap.add_argument(
        "--parallel",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="every other run refunds two orders in one parallel step",
    )
    args = ap.parse_args(argv)
    result = run_round(args)
    _say(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
