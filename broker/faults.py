"""Crash points for fault-injection tests: die between a ledger commit and its publish.

Off unless ``WARRANT_CRASH_POINT`` names the point; ``WARRANT_CRASH_ONCE_FILE`` makes it
one-shot (the process dies only while that file exists, and removes it first); if the file
holds a run id, only that run's stage dies.
"""

from __future__ import annotations

import os

__all__ = ["crash_point"]


def crash_point(name: str, run_id: str | None = None) -> None:
    if os.environ.get("WARRANT_CRASH_POINT") != name:
        return
    marker = os.environ.get("WARRANT_CRASH_ONCE_FILE")
    if marker:
        try:
            with open(marker) as f:
                target = f.read().strip()
        except FileNotFoundError:
            return
        if target and run_id is not None and target != run_id:
            return
        try:
            os.unlink(marker)
        except FileNotFoundError:
            return
    os._exit(70)  # like SIGKILL: no cleanup, no publish
