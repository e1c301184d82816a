"""The latency part's table, its targets (met/missed) and its JSON (:mod:`bench.latency`)."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

__all__ = ["TARGET_N", "print_results", "targets", "write_json"]

#: The run size the targets are judged at (fixed latency: model 1 s, tool 0.5 s).
TARGET_N = 1000
#: Target: steps/s with latency at least this share of the zero-latency steps/s.
TARGET_VS_ZERO = 0.8
#: Target: warrant's steps/s at least this share of DBOS's.
TARGET_VS_DBOS = 1.0
#: Target: model calls in flight at the peak.
TARGET_IN_FLIGHT = 500
#: Target: the planner workers' RSS grows at most this over idle (MiB).
TARGET_PLANNER_GROWTH_MB = 300


def _find(results: list[dict[str, Any]], pipeline: str, n: int, profile: str) -> dict[str, Any]:
    for r in results:
        if (r["pipeline"], r["n"], r["profile"]) == (pipeline, n, profile):
            return r
    return {}


def _with_ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each result with ``vs_zero`` (its steps/s over its pipeline's zero-latency steps/s at
    the same N) and, for warrant, ``vs_dbos`` (over DBOS's at the same N and profile)."""
    out = []
    for r in results:
        zero = _find(results, r["pipeline"], r["n"], "zero")
        dbos = _find(results, "DBOS", r["n"], r["profile"]) if r["pipeline"] == "warrant" else {}
        out.append(
            {
                **r,
                "vs_zero": r["steps_per_s"] / zero["steps_per_s"] if zero else None,
                "vs_dbos": r["steps_per_s"] / dbos["steps_per_s"] if dbos else None,
            }
        )
    return out


def _growth(r: dict[str, Any], role: str) -> float:
    return float(r["rss_peak_mb"].get(role, 0.0) - r["rss_idle_mb"].get(role, 0.0))


def targets(results: list[dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """(target, figure, met) at N = :data:`TARGET_N`, fixed latency; met None: not measured."""
    rows = _with_ratios(results)
    w = _find(rows, "warrant", TARGET_N, "fixed")
    if not w:
        return [(f"N={TARGET_N} with fixed latency", "not measured", None)]
    growth = _growth(w, "planner")
    vs_dbos = w["vs_dbos"]
    where = f"N={TARGET_N}, model {w['model_latency']}, tool {w['tool_latency']}"
    vs_zero = w["vs_zero"]
    return [
        (
            f"steps/s >= {TARGET_VS_ZERO}x zero-latency steps/s ({where})",
            "zero latency not run" if vs_zero is None else f"{vs_zero:.2f}x",
            None if vs_zero is None else vs_zero >= TARGET_VS_ZERO,
        ),
        (
            f"steps/s >= {TARGET_VS_DBOS}x DBOS ({where})",
            "DBOS not run" if vs_dbos is None else f"{vs_dbos:.2f}x",
            None if vs_dbos is None else vs_dbos >= TARGET_VS_DBOS,
        ),
        (
            f">= {TARGET_IN_FLIGHT} model calls in flight at peak",
            str(w["peak_model_in_flight"]),
            w["peak_model_in_flight"] >= TARGET_IN_FLIGHT,
        ),
        (
            f"planner workers' RSS grows <= {TARGET_PLANNER_GROWTH_MB} MB over idle",
            f"{growth:+.0f} MB",
            growth <= TARGET_PLANNER_GROWTH_MB,
        ),
    ]


def _rss_cell(r: dict[str, Any]) -> str:
    return ", ".join(
        f"{role} {r['rss_idle_mb'].get(role, 0):.0f}→{peak:.0f}"
        for role, peak in r["rss_peak_mb"].items()
    )


def _table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(
        title=f"latency: N runs at once, 3 model + 2 tool calls each — {os.cpu_count()} cores,"
        f" Python {platform.python_version()} (step = one model call + what follows it)"
    )
    for name in ("pipeline", "N", "latency", "start s", "held", "wall s", "runs/s", "steps/s"):
        table.add_column(name, justify="left" if name in ("pipeline", "latency") else "right")
    for name in ("vs zero", "vs DBOS", "model in flight", "tool in flight"):
        table.add_column(name, justify="right")
    table.add_column("RSS MB idle→peak (per role)")
    table.add_column("PG conns", justify="right")
    for r in rows:
        table.add_row(
            r["pipeline"],
            str(r["n"]),
            r["profile"],
            f"{r['start_s']:.1f}",
            str(r["held_at_open"]),
            f"{r['wall_s']:.1f}",
            f"{r['runs_per_s']:.1f}",
            f"{r['steps_per_s']:.1f}",
            "-" if r["vs_zero"] is None else f"{r['vs_zero']:.2f}",
            "-" if r["vs_dbos"] is None else f"{r['vs_dbos']:.2f}",
            f"{r['peak_model_in_flight']} ("
            + "/".join(str(v) for _, v in sorted(r["model_peak_in_flight_by_call"].items()))
            + ")",
            str(r["peak_tool_in_flight"]),
            _rss_cell(r),
            str(r["peak_pg_connections"]),
        )
    return table


def _cpu_table(rows: list[dict[str, Any]]) -> Any:
    """CPU per step of each process group over each measure: where the machine went."""
    from rich.table import Table

    groups = list(dict.fromkeys(g for r in rows for g in r["cpu_s"]))
    table = Table(title="CPU per step during each measure (ms; servers shared with others)")
    for name in ("pipeline", "N", "latency"):
        table.add_column(name)
    counters = {
        "pg_commits": "PG commits",
        "pg_statements": "PG statements",
        "pg_sessions": "PG sessions",
        "redis_commands": "Redis cmds",
    }
    for g in [*groups, "all", "all / wall (cores)", *(f"{c} / step" for c in counters.values())]:
        table.add_column(g, justify="right")
    for r in rows:
        steps = r["n"] * r["steps_per_s"] / r["runs_per_s"]
        cells = [f"{r['cpu_s'].get(g, 0.0) / steps * 1000:.1f}" for g in groups]
        total = sum(r["cpu_s"].values())
        cells += [f"{total / steps * 1000:.1f}", f"{total / r['wall_s']:.2f}"]
        counted = r.get("counted") or {}
        cells += [f"{counted[c] / steps:.1f}" if c in counted else "-" for c in counters]
        table.add_row(r["pipeline"], str(r["n"]), r["profile"], *cells)
    return table


def print_results(console: Any, results: list[dict[str, Any]], *, dbos_skipped: str | None) -> None:
    rows = _with_ratios(results)
    console.print(_table(rows))
    console.print(_cpu_table(rows))
    labels = {r["profile"]: f"model {r['model_latency']}, tool {r['tool_latency']}" for r in rows}
    console.print(
        "latency: "
        + "; ".join(f"{p}: {label}" for p, label in labels.items())
        + ". start s: creating the N runs until all waited on their first model call (the"
        " model's gate closed); held: first model calls waiting when the gate opened; wall s:"
        " gate open to the last run's end (the database's clock);"
        " vs zero: steps/s over the same pipeline's zero-latency steps/s at the same N;"
        " in flight: the most calls the fake model / tool service answered at once (model: in"
        " all, and among the runs' first/second/third calls);"
        " PG conns: peak connections to the bench's databases",
        markup=False,
    )
    pools = {f"{r['pipeline']} {role}: {pool}" for r in rows for role, pool in r["pools"].items()}
    console.print("pools: " + "; ".join(sorted(pools)), markup=False)
    for r in rows:
        procs = r["rss_peak_per_process_mb"]
        idle = r["rss_idle_per_process_mb"]
        cells = [
            f"{role} {pid}: {idle.get(role, {}).get(pid, 0):.0f}→{mb:.0f}"
            for role, ps in procs.items()
            for pid, mb in ps.items()
        ]
        console.print(
            f"RSS per process (MB), {r['pipeline']} N={r['n']} {r['profile']}: " + ", ".join(cells),
            markup=False,
        )
    if dbos_skipped:
        console.print(f"DBOS skipped: {dbos_skipped}", markup=False)
    for target, figure, met in targets(results):
        verdict = "not measured" if met is None else ("met" if met else "MISSED")
        console.print(f"target: {target}: {figure} — {verdict}", markup=False)


def write_json(path: Path, results: list[dict[str, Any]]) -> None:
    record = {
        "results": _with_ratios(results),
        "targets": [{"target": t, "figure": f, "met": m} for t, f, m in targets(results)],
    }
    path.write_text(json.dumps(record, indent=1, default=str))
