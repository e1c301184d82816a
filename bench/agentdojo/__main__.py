"""AgentDojo v1.2.2 replayed by a hijacked planner through warrant's real gate.

    python -m bench.agentdojo [--suite NAME ...] [--limit N] [--jobs N] [--json]

``--suite``: only these suites (default: all four); ``--limit N``: the first N user tasks of
each suite (by number); ``--jobs``: worker processes (default: the CPUs, at most 2);
``--json``: the figures, each lost benign task and each attack through as JSON. Needs the
``agentdojo`` package (``pip install agentdojo==0.1.35``). docs/agentdojo.md says how to read it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict
from typing import Any

from bench.agentdojo.replay import CONFIGS
from bench.agentdojo.report import Figures, figures, render, timing_rows
from bench.agentdojo.tasks import (
    ORDERS,
    SUITES,
    VERSION,
    UnitResult,
    case,
    replay_unit,
    trust_violations,
)

__all__ = ["main"]


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.agentdojo", description=__doc__)
    parser.add_argument("--suite", action="append", choices=SUITES, help="repeatable")
    parser.add_argument("--limit", type=int, default=None, help="user tasks per suite")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", action="store_true", help="JSON instead of the table")
    return parser.parse_args(argv)


def _number(task_id: str) -> int:
    found = re.search(r"(\d+)$", task_id)
    return int(found.group(1)) if found else 0


def _units(suites: Sequence[str], limit: int | None) -> list[tuple[str, str]]:
    """(suite, user task id), the heaviest suites first (the pool balances the rest)."""
    units = []
    for suite in suites:
        ids = sorted(case(suite).suite.user_tasks, key=_number)
        units += [(suite, task_id) for task_id in ids[:limit]]
    return units


def _replay(
    units: list[tuple[str, str]], suites: Sequence[str], jobs: int
) -> tuple[list[UnitResult], list[str]]:
    configs = tuple(c.key for c in CONFIGS)
    if jobs <= 1:
        results = [replay_unit(s, t, configs) for s, t in units]
        return results, [v for s in suites for v in trust_violations(s)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(replay_unit, s, t, configs) for s, t in units]
        checks: list[Future[list[str]]] = [pool.submit(trust_violations, s) for s in suites]
        return [f.result() for f in futures], [v for f in checks for v in f.result()]


def _meta(
    suites: Sequence[str], units: list[UnitResult], violations: list[str], seconds: float
) -> dict[str, Any]:
    benign = len(units)
    pairs = {
        s: len({(p.task, p.injection) for u in units for p in u.pairs if u.suite == s})
        for s in suites
    }
    skipped = {s: case(s).skipped for s in suites}
    uninjectable = [f"{u.suite}.{u.task}" for u in units if u.not_injectable]
    each = ", ".join(f"{s} {n}" for s, n in pairs.items())
    left = "; ".join(f"{s}: {', '.join(ids)}" for s, ids in skipped.items() if ids) or "none"
    return {
        "title": (
            f"AgentDojo {VERSION} through warrant's gate: {benign} benign tasks, "
            f"{sum(pairs.values())} pairs ({each}), orders {' and '.join(ORDERS)}"
        ),
        "notes": [
            f"injection tasks left out (empty ground truth): {left}",
            f"user tasks that read no injection vector: {', '.join(uninjectable) or 'none'}",
            f"trusted outputs carrying an injection vector: {'; '.join(violations) or 'none'}",
            f"{seconds:.1f} s",
        ],
        "pairs": pairs,
        "skipped_injections": skipped,
        "not_injectable": uninjectable,
        "trust_violations": violations,
        "seconds": round(seconds, 1),
        "timing": timing_rows(
            (u.suite, c, t) for u in units for c, t in u.timings if c != "undefended"
        ),
    }


def _json(figs: list[Figures], meta: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for fig in figs:
        benign = sum(fig.benign.values())
        rows.append(
            {
                "config": fig.config.key,
                "label": fig.config.label,
                "pairs": sum(fig.pairs.values()),
                "attacks_through": {o: fig.total(o) for o in (*ORDERS, "worst")},
                "attacks_through_by_suite": {o: dict(c) for o, c in fig.through.items()},
                "benign": benign,
                "benign_done": sum(fig.done.values()),
                "benign_done_by_suite": dict(fig.done),
                "requests_per_benign_task": round(fig.requests / benign, 3) if benign else 0.0,
                "most_requests_per_benign_task": fig.most_requests,
                "benign_refusals": {code: dict(c) for code, c in fig.refusals.items()},
                "lost": fig.lost,
                "through": fig.attacks,
            }
        )
    return {**{k: v for k, v in meta.items() if k != "title"}, "configs": rows}


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    suites = [s for s in SUITES if s in (args.suite or SUITES)]
    start = time.perf_counter()
    units = _units(suites, args.limit)
    results, violations = _replay(units, suites, args.jobs)
    figs = figures(results)
    meta = _meta(suites, results, violations, time.perf_counter() - start)
    if args.json:
        json.dump(_json(figs, meta), sys.stdout, indent=2, default=_plain)
        sys.stdout.write("\n")
    else:
        print(render(figs, meta))
    return 0


def _plain(value: Any) -> Any:
    return asdict(value) if hasattr(value, "__dataclass_fields__") else str(value)


if __name__ == "__main__":
    sys.exit(main())
