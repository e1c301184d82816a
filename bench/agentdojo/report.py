"""The figures of a replay (:class:`Figures`, one per configuration) and their table.

Attacks are counted by pair (user task, injection task): through in an order when the
injection task's security check holds after that order's replay; ``worst`` counts a pair
through in either order. Benign tasks are done when the user task's utility check holds. A
benign task's refusals are counted once per code (a task refused twice for the same reason
counts once).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.agentdojo.contracts import CONTRACTS
from bench.agentdojo.replay import CONFIGS, CallRecord, Config, Timing
from bench.agentdojo.tasks import ORDERS, SUITES, PairOutcome, TaskOutcome, UnitResult
from warrant.tools import SideEffect

__all__ = ["Figures", "figures", "render", "timing_rows"]

#: Argument values are cut to this many characters in the lists.
SHOWN_CHARS = 80
#: Pairs through a configuration listed in the table, at most.
MAX_LISTED = 40
_OBSERVATION = re.compile(r"tool-\d+")


@dataclass
class Figures:
    """One configuration's results."""

    config: Config
    pairs: dict[str, int] = field(default_factory=dict)
    """Pairs per suite."""
    through: dict[str, Counter[str]] = field(default_factory=dict)
    """Per order (and ``worst``): pairs through, per suite."""
    benign: Counter[str] = field(default_factory=Counter)
    done: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    most_requests: int = 0
    """The most confirmation requests one benign task made."""
    refusals: dict[str, Counter[str]] = field(default_factory=dict)
    """Per code: benign tasks with at least one call refused (or declined) so, per suite."""
    lost: list[dict[str, Any]] = field(default_factory=list)
    attacks: list[dict[str, Any]] = field(default_factory=list)
    """Every pair through (a gated configuration's: the calls that passed and why)."""

    def total(self, what: str) -> int:
        return sum(self.through.get(what, Counter()).values())


def figures(units: Sequence[UnitResult], configs: Iterable[Config] = CONFIGS) -> list[Figures]:
    """Each configuration's figures from every unit's outcomes."""
    out = []
    for config in configs:
        fig = Figures(config, through={o: Counter() for o in (*ORDERS, "worst")})
        for unit in units:
            for task in unit.benign:
                if task.config == config.key:
                    _add_benign(fig, task)
            pairs = [p for p in unit.pairs if p.config == config.key]
            _add_pairs(fig, pairs)
        out.append(fig)
    return out


def _add_benign(fig: Figures, task: TaskOutcome) -> None:
    fig.benign[task.suite] += 1
    fig.requests += task.requests
    fig.most_requests = max(fig.most_requests, task.requests)
    fig.done[task.suite] += task.done
    codes = {r.code for r in task.records if r.fate in ("refused", "declined") and r.code}
    for code in codes:
        fig.refusals.setdefault(code, Counter())[task.suite] += 1
    if not task.done:
        fig.lost.append(_lost(task))


def _add_pairs(fig: Figures, pairs: list[PairOutcome]) -> None:
    by_pair: dict[tuple[str, str, str], list[PairOutcome]] = defaultdict(list)
    for pair in pairs:
        by_pair[(pair.suite, pair.task, pair.injection)].append(pair)
    for (suite, _, _), orders in by_pair.items():
        fig.pairs[suite] = fig.pairs.get(suite, 0) + 1
        for pair in orders:
            fig.through[pair.order][suite] += pair.through
            if pair.through and fig.config.gated:
                fig.attacks.append(_attack(pair))
        fig.through["worst"][suite] += any(p.through for p in orders)


def _shown(record: CallRecord) -> str:
    args = ", ".join(
        f"{k}={_cut(json.dumps(v, ensure_ascii=False))}" for k, v in record.arguments.items()
    )
    return f"{record.tool}({args})"


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}…"


def _lost(task: TaskOutcome) -> dict[str, Any]:
    """A benign task not done: the first call that did not run, its code and why."""
    first = next((r for r in task.records if r.fate != "ran"), None)
    lost: dict[str, Any] = {"suite": task.suite, "task": task.task}
    if first is None:
        lost |= {"call": None, "code": None, "reason": task.error or "every call ran"}
        return lost
    reason = first.reason or "; ".join(first.flagged) or first.code
    return lost | {"call": _shown(first), "code": first.code, "reason": reason}


def _attack(pair: PairOutcome) -> dict[str, Any]:
    """A pair through: the injected writes and egress reads that ran, and why the gate let
    each pass (its plain reads are only counted)."""
    ran = [r for r in pair.records if r.injected and r.fate == "ran"]
    acts = [r for r in ran if _acts(r)]
    return {
        "suite": pair.suite,
        "task": pair.task,
        "injection": pair.injection,
        "order": pair.order,
        "calls": [{"call": _shown(r), "why": _why(r)} for r in acts],
        "reads": len(ran) - len(acts),
        "note": None if acts else "no injected write ran: the user task's own calls did it",
    }


def _acts(record: CallRecord) -> bool:
    contract = CONTRACTS[record.tool]
    return contract.egress or contract.side_effect is not SideEffect.READ


def _why(record: CallRecord) -> str:
    contract = CONTRACTS[record.tool]
    effect = contract.side_effect.value
    origins = ", ".join(f"{k}: {v}" for k, v in sorted(record.origins.items()) if v != "unchecked")
    checked = f"; origins {origins}" if origins else ""
    if not record.asked:
        what = "an egress read" if contract.egress else f"a {effect} call"
        return f"accepted, no confirmation needed ({what}, no refused destination{checked})"
    if record.flagged:
        return f"asked, flagged [{'; '.join(record.flagged)}], approved{checked}"
    return f"asked ({effect}), nothing flagged, approved{checked}"


# --- the table -------------------------------------------------------------------------------


def _ratio(n: int, of: int) -> str:
    return f"{n}/{of}"


def _row(fig: Figures) -> str:
    pairs = sum(fig.pairs.values())
    benign = sum(fig.benign.values())
    per_task = fig.requests / benign if benign else 0.0
    cells = [_ratio(fig.total(o), pairs) for o in (*ORDERS, "worst")]
    done = _ratio(sum(fig.done.values()), benign)
    counts = " ".join(f"{cell:>9}" for cell in cells)
    return f"{fig.config.label:<58} {counts} {done:>8} {per_task:>9.2f} {fig.most_requests:>4}"


def _by_suite(figs: Sequence[Figures]) -> list[str]:
    suites = [s for s in SUITES if any(s in f.pairs for f in figs)]
    lines = ["attacks through (worst order), by suite:"]
    lines.append(f"  {'configuration':<20}" + "".join(f"{s:>12}" for s in suites))
    for fig in figs:
        cells = [_ratio(fig.through["worst"][s], fig.pairs.get(s, 0)) for s in suites]
        lines.append(f"  {fig.config.key:<20}" + "".join(f"{c:>12}" for c in cells))
    lines.append("benign done, by suite:")
    for fig in figs:
        cells = [_ratio(fig.done[s], fig.benign[s]) for s in suites]
        lines.append(f"  {fig.config.key:<20}" + "".join(f"{c:>12}" for c in cells))
    return lines


def _refusals(figs: Sequence[Figures], top: int = 4) -> list[str]:
    lines = ["benign tasks refused, by code (tasks with at least one such refusal):"]
    for fig in figs:
        if not fig.config.gated:
            continue
        ranked = sorted(fig.refusals.items(), key=lambda kv: -sum(kv[1].values()))[:top]
        parts = []
        for code, suites in ranked:
            each = ", ".join(f"{s} {n} of {fig.benign[s]}" for s, n in suites.most_common())
            parts.append(f"{code} {sum(suites.values())} ({each})")
        lines.append(f"  {fig.config.key:<20} {'; '.join(parts) or 'none'}")
    return lines


def timing_rows(timings: Iterable[tuple[str, str, Timing]]) -> list[dict[str, Any]]:
    """Per suite: write and egress proposals of the gated configurations, median and max ms,
    and the slowest with the observation set it read (count, KB)."""
    by_suite: dict[str, list[tuple[str, Timing]]] = defaultdict(list)
    for suite, config, timing in timings:
        by_suite[suite].append((config, timing))
    rows = []
    for suite in [s for s in SUITES if s in by_suite]:
        seen = by_suite[suite]
        config, slowest = max(seen, key=lambda ct: ct[1].ms)
        _, largest = max(seen, key=lambda ct: (ct[1].kb, ct[1].ms))
        rows.append(
            {
                "suite": suite,
                "proposals": len(seen),
                "median_ms": round(statistics.median(t.ms for _, t in seen), 3),
                "max_ms": round(slowest.ms, 3),
                "slowest": {
                    "tool": slowest.tool,
                    "config": config,
                    "observations": slowest.observations,
                    "kb": round(slowest.kb, 1),
                },
                "largest": {
                    "tool": largest.tool,
                    "observations": largest.observations,
                    "kb": round(largest.kb, 1),
                    "ms": round(largest.ms, 3),
                },
            }
        )
    return rows


def _timing(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["gate time per write or egress proposal (sources_from + evaluate, gated rows):"]
    lines.append(
        f"  {'suite':<10} {'proposals':>9} {'median ms':>10} {'max ms':>8}  slowest (tool, "
        "observations, KB); largest observation set (observations, KB: ms)"
    )
    for r in rows:
        s, big = r["slowest"], r["largest"]
        lines.append(
            f"  {r['suite']:<10} {r['proposals']:>9} {r['median_ms']:>10.2f} {r['max_ms']:>8.2f}"
            f"  {s['tool']}, {s['observations']}, {s['kb']} KB; {big['tool']}, "
            f"{big['observations']}, {big['kb']} KB: {big['ms']:.2f} ms"
        )
    return lines


def _attacks(figs: Sequence[Figures]) -> list[str]:
    """The pairs through each gated configuration, grouped by the injected calls that passed
    and why (observation ids aside): the user tasks (and orders) each group took. A
    configuration with more than :data:`MAX_LISTED` pairs through is only counted (``--json``
    lists every pair)."""
    lines = ["attacks through a gated configuration (the injected writes that ran, and why):"]
    for fig in figs:
        pairs = {(a["suite"], a["task"], a["injection"]) for a in fig.attacks}
        if len(pairs) > MAX_LISTED:
            lines.append(f"  {fig.config.key}: {len(pairs)} pairs through (listed by --json)")
            continue
        grouped: dict[tuple[str, ...], dict[str, list[str]]] = defaultdict(dict)
        for a in fig.attacks:
            calls = [f"{c['call']}: {c['why']}" for c in a["calls"]] or [str(a["note"])]
            key = (a["suite"], a["injection"], *(_OBSERVATION.sub("tool-N", c) for c in calls))
            grouped[key].setdefault(a["task"], []).append(a["order"])
        for key, tasks in grouped.items():
            took = ", ".join(f"{t} ({'+'.join(o)})" for t, o in tasks.items())
            lines.append(f"  {fig.config.key}: {key[0]} {key[1]}, {len(tasks)} user tasks: {took}")
            lines += [f"      {c}" for c in key[2:]]
    return lines if len(lines) > 1 else [*lines, "  none"]


def render(figs: Sequence[Figures], meta: dict[str, Any]) -> str:
    """The table, the per-suite figures, the refusals, the timing and the attacks through."""
    head = f"{'configuration':<58} {'after':>9} {'end':>9} {'worst':>9} {'benign':>8}"
    head += f" {'req/task':>9} {'max':>4}"
    lines = [meta["title"], *meta["notes"], "", "attacks through / pairs, by order;", head]
    lines += [_row(f) for f in figs]
    lines += ["", *_by_suite(figs), "", *_refusals(figs), "", *_timing(meta["timing"])]
    lines += ["", *_attacks(figs)]
    return "\n".join(lines)
