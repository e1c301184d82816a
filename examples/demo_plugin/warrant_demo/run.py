"""``warrant demo``: run the seed scenarios against a running stack and show the result."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from warrant.runner.client.api import Client
from warrant_demo.scenarios import SCENARIOS

__all__ = ["run_demo"]


def run_demo(*, as_json: bool, console: Console, timeout: float = 60.0) -> bool:
    client = Client.from_env()
    rows: list[dict[str, Any]] = []
    with Progress(console=console, transient=True, disable=as_json) as progress:
        task = progress.add_task("scenarios", total=len(SCENARIOS))
        started = [(sc, client.start_run(sc["spec"])) for sc in SCENARIOS]
        for sc, run_id in started:
            progress.update(task, description=sc["name"])
            info = client.wait(run_id, timeout=timeout)
            expected = tuple(sc["expect"])
            rows.append(
                {
                    "scenario": sc["name"],
                    "title": sc["title"],
                    "run_id": run_id,
                    "status": info.status,
                    "stop_reason": info.stop_reason,
                    "steps": info.step,
                    "tool_calls": info.tool_calls,
                    "expected": list(expected),
                    "ok": (info.status, info.stop_reason) == expected,
                }
            )
            progress.advance(task)
    if as_json:
        sys.stdout.write(json.dumps({"scenarios": rows}, indent=2) + "\n")
    else:
        table = Table("scenario", "status", "stop reason", "steps", "tools", "as expected")
        for r in rows:
            table.add_row(
                r["scenario"],
                r["status"],
                r["stop_reason"] or "",
                str(r["steps"]),
                str(r["tool_calls"]),
                "[green]yes[/]" if r["ok"] else "[red]NO[/]",
            )
        console.print(table)
    return all(r["ok"] for r in rows)
