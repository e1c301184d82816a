"""A verdict over several benchmark runs: the side-by-side part of ``python -m bench``, repeated.

    python -m bench.series [--runs 5] [--rounds 4] [--out DIR]

Runs ``python -m bench --only compare`` ``--runs`` times with task events off and as many with
them on, alternating (off, on, off, …: a slow phase of this machine weighs on both modes), each
a fresh process with its own workers and database, and prints one line per run and the median
of the runs' ratios, warrant/baseline and warrant/DBOS, against the targets: throughput ≥ 1.0,
p50 and p95 ≤ 1.0. Each run's figures are kept as JSON in ``--out``. ``make bench-series``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]

DEFAULT_RUNS = 5
DEFAULT_OUT = Path("/tmp/warrant-bench/series")
#: (label, results key of warrant's figure, of the other pipeline's, better when lower)
MEASURES = (("p50", "p50", True), ("p95", "p95", True), ("throughput", "tput", False))


def _run(out: Path, index: int, *, events: bool, rounds: int | None) -> dict[str, Any]:
    path = out / f"{'on' if events else 'off'}-{index}.json"
    command = [sys.executable, "-m", "bench", "--only", "compare", "--results", str(path)]
    command += ["--events"] if events else []
    command += ["--rounds", str(rounds)] if rounds else []
    log = path.with_suffix(".log")
    with log.open("wb") as f:
        subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, check=True)
    return dict(json.loads(path.read_text()))


def _ratios(r: dict[str, Any], other: str) -> dict[str, float] | None:
    """warrant/``other`` (``base`` or ``d``): latency as a ratio of percentiles, throughput as
    the median of the rounds' ratios (as ``python -m bench`` prints them)."""
    if f"{other}_p50" not in r:
        return None
    rounds = r["tput_ratios"] if other == "base" else r["d_tput_ratios"]
    return {
        "p50": r["w_p50"] / r[f"{other}_p50"],
        "p95": r["w_p95"] / r[f"{other}_p95"],
        "throughput": statistics.median(rounds),
    }


def _line(index: int, r: dict[str, Any]) -> str:
    parts = [f"{index}:"]
    for other, name in (("base", "baseline"), ("d", "DBOS")):
        ratios = _ratios(r, other)
        if ratios:
            parts.append(f"w/{name} " + " · ".join(f"{ratios[k]:.2f}" for k, _, _ in MEASURES))
    cpu = r["cpu_ms_per_step"]
    parts.append(
        "CPU ms/step "
        + " · ".join(f"{name} {sum(cpu[p].values()):.2f}" for p, name in _CPU_NAMES if p in cpu)
    )
    return "  ".join(parts)


_CPU_NAMES = (("base", "baseline"), ("warrant", "warrant"), ("dbos", "DBOS"))


def _verdict(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for other, name in (("base", "baseline"), ("d", "DBOS")):
        ratios = [x for r in results if (x := _ratios(r, other))]
        if not ratios:
            continue
        cells = []
        for label, _, lower in MEASURES:
            median = statistics.median(x[label] for x in ratios)
            met = median <= 1.0 if lower else median >= 1.0
            cells.append(f"{label} {median:.2f} ({'met' if met else 'NOT met'})")
        lines.append(f"median of {len(ratios)}, warrant/{name}: " + ", ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per events mode")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per run (bench's)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON and logs here")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    done: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(1, args.runs + 1):
        for events in (False, True):
            r = _run(args.out, i, events=events, rounds=args.rounds)
            done[events].append(r)
            print(f"events {'on ' if events else 'off'} {_line(i, r)}", flush=True)
    for events, results in done.items():
        print(f"\ntask events {'on' if events else 'off'}:")
        for line in _verdict(results):
            print("  " + line)


if __name__ == "__main__":
    main()
