"""The mixed load: run specs over the demo tools, and the demo service's fault mix."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

from warrant_demo import scenarios as sc

__all__ = ["KINDS", "Planned", "plan_run", "service_fault"]

#: Run kinds and their shares of the load.
KINDS: dict[str, float] = {
    "read": 0.15,
    "refund": 0.3,
    "draft": 0.15,
    "confirm": 0.15,
    "refund_job": 0.125,
    "payout": 0.125,
    "parallel": 0.12,
}
#: Share of write runs cancelled mid-way.
CANCEL_SHARE = 0.15

#: The demo service's faults for the write tools (mode, weight, delay_s).
FAULT_MIX: dict[str, list[tuple[str, float, float]]] = {
    "issue_refund": [
        ("slow", 0.55, 2.5),
        ("transient", 0.07, 0.0),
        ("timeout_before_commit", 0.08, 0.0),
        ("timeout_after_commit", 0.08, 0.0),
        ("slow_after_commit", 0.08, 1.5),
        ("reject", 0.05, 0.0),
        ("fail", 0.05, 0.0),
        ("crash", 0.04, 0.0),
    ],
    "save_draft": [
        ("slow", 0.5, 2.0),
        ("transient", 0.0, 0.0),
        ("timeout_before_commit", 0.1, 0.0),
        ("timeout_after_commit", 0.1, 0.0),
        ("corrupt_read", 0.1, 0.0),
        ("reject", 0.1, 0.0),
        ("crash", 0.1, 0.0),
    ],
    "lookup": [("slow", 0.5, 1.0), ("transient", 0.25, 0.0), ("fail", 0.25, 0.0)],
    # a refund the service settles later: faults of the call, and of the job's settlement
    "refund_async": [
        ("slow", 0.2, 1.5),
        ("transient", 0.1, 0.0),
        ("timeout_before_commit", 0.1, 0.0),
        ("timeout_after_commit", 0.15, 0.0),
        ("slow_settle", 0.3, 3.0),
        ("settle_fail", 0.15, 0.0),
    ],
    # a batch payout: each fault hits one item of a batch
    "payout_batch": [
        ("transient", 0.35, 0.0),
        ("timeout_after_commit", 0.25, 0.0),
        ("timeout_before_commit", 0.15, 0.0),
        ("slow", 0.25, 1.0),
    ],
}


def _tool(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": "p1",
        "tool": tool,
        "tool_version": "1",
        "arguments": arguments,
        "reason_summary": "chaos",
        "source_observation_ids": ["user-1"],
    }


@dataclass(frozen=True)
class Planned:
    kind: str
    spec: dict[str, Any]
    cancel_after_s: float | None
    """Cancel this long after the start (None: never)."""


def plan_run(rng: random.Random, *, wait_ms: tuple[int, int] | None = None) -> Planned:
    """One run of the mix; with ``wait_ms``, its action comes after a read that waits that long
    (``wait_read``: the concurrency campaign's way to hold hundreds of runs in flight)."""
    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    tag = uuid.UUID(int=rng.getrandbits(128)).hex[:12]
    grants: list[dict[str, Any]]
    if kind == "read":
        step = _tool("lookup", {"query": f"order {tag}"})
        grants = [{"capability": "lookup:read"}]
    elif kind == "refund":
        step = _tool(
            "issue_refund",
            {"order_id": f"ord_{tag}", "amount_cents": rng.randint(100, 9_999), "currency": "EUR"},
        )
        grants = [{"capability": "payments:refund"}]
    elif kind == "refund_job":
        step = _tool(
            "refund_async",
            {"order_id": f"ord_{tag}", "amount_cents": rng.randint(100, 9_999), "currency": "EUR"},
        )
        grants = [{"capability": "payments:refund"}]
    elif kind == "payout":
        items = [
            {
                "payout_id": f"po_{tag}{i}",
                "recipient": f"p{i}-{tag}@example.com",
                "amount_cents": 100,
            }
            for i in range(rng.randint(2, 5))
        ]
        step = _tool("payout_batch", {"payouts": items})
        grants = [{"capability": "payments:payout"}]
    elif kind == "draft":
        step = _tool("save_draft", {"draft_id": f"d-{tag}", "content": f"draft {tag}"})
        grants = [{"capability": "drafts:write"}]
    elif kind == "parallel":  # two writes in one step, each with its own command and token
        refund = _tool(
            "issue_refund",
            {"order_id": f"ord_{tag}", "amount_cents": rng.randint(100, 9_999), "currency": "EUR"},
        )
        draft = _tool("save_draft", {"draft_id": f"d-{tag}", "content": f"draft {tag}"})
        calls = [{**refund, "proposal_id": "p1a"}, {**draft, "proposal_id": "p1b"}]
        step = {"kind": "parallel", "proposal_id": "p1", "calls": calls, "merge": "all"}
        grants = [{"capability": "payments:refund"}, {"capability": "drafts:write"}]
    else:
        step = _tool("save_preference", {"key": "answer_language", "value": "en"})
        grants = [{"capability": "memory:write", "resource_scope": f"memory:chaos-{tag}/*"}]
    steps = [step]
    waited_s = 0.0
    if wait_ms is not None:
        ms = rng.randint(*wait_ms)
        waited_s = ms / 1000
        wait = _tool("wait_read", {"n": 1, "ms": ms})
        steps = [{**wait, "proposal_id": "p0"}, step]
        grants = [*grants, {"capability": "bench:read"}]
    cites = ["job-1"] if kind == "refund_job" else [f"tool-{len(steps)}"]  # a job's final one
    if kind == "parallel":
        cites = [f"tool-{len(steps)}.1", f"tool-{len(steps)}.2"]
    spec = sc.spec(
        [*steps, sc.final("Done.", *cites)],
        grants=grants,
        max_steps=5,
        max_model_calls=5,
        max_tool_calls=5,
        deadline_s=900,
    )
    spec["subject"] = f"chaos-{tag}"
    cancel = None
    if kind != "read" and rng.random() < CANCEL_SHARE:
        cancel = waited_s + rng.uniform(0.3, 4.0)  # while the action runs, mostly
    return Planned(kind, spec, cancel)


def service_fault(tool: str, rng: random.Random) -> tuple[str, float]:
    mix = FAULT_MIX[tool]
    mode, _, delay = rng.choices(mix, weights=[w for _, w, _ in mix])[0]
    return mode, delay
