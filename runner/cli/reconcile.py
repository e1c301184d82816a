"""``warrant reconcile``: one reconciler sweep in this process (the broker's stage, loaded only
for this command)."""

from __future__ import annotations

from warrant.broker.context import worker_context
from warrant.broker.reconciler.stage import sweep
from warrant.runner.cli.common import JsonOpt, console, guard, print_json

__all__ = ["reconcile_once"]


def reconcile_once(as_json: JsonOpt = False) -> None:
    """Run one reconciler sweep now, in this process (beat schedules them normally)."""
    report = guard(as_json, lambda: sweep(worker_context()).to_dict())
    print_json(report) if as_json else console.print(report)
