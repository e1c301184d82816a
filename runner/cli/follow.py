"""Following a run while it moves (``run start --wait``, ``run wait``): one progress line per
change of the run (its version), until it settles or the wait's timeout passes.

Each change comes from the client's ``wait_change``: a database-backed client polls the ledger
(a growing pause, 50 ms to 0.5 s); a remote one long-polls ``GET /v1/runs/{id}/wait?version=``,
so the server answers once per change, not per look."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from warrant.runner.client.run_info import SETTLED

if TYPE_CHECKING:
    from warrant.runner.client.contract import RunnerClient
    from warrant.runner.client.run_info import RunInfo


__all__ = ["Progress", "follow", "progress_line"]


class Progress:
    """Where the progress line goes: ``stream`` rewritten in place (a rich status line) when
    it is a terminal, else one plain line per change (a log or a pipe reads every one)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self._status: Status | None = None
        self._last: str | None = None

    @classmethod
    def for_output(cls, *, as_json: bool) -> Progress:
        """On stderr with ``--json`` (stdout stays one JSON document), else on stdout."""
        return cls(sys.stderr if as_json else sys.stdout)

    def show(self, line: str) -> None:
        if line == self._last:
            return
        self._last = line
        if not self.live:
            self.stream.write(line + "\n")
            self.stream.flush()
        elif self._status is None:
            self._status = Console(file=self.stream).status(escape(line), spinner="dots")
            self._status.start()
        else:
            self._status.update(escape(line))

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def progress_line(info: RunInfo, event: dict[str, Any] | None) -> str:
    """``run ID: step N · status/phase · last event (its tool or code)``."""
    line = f"run {info.run_id}: step {info.step} · {info.status}/{info.phase}"
    if event is not None:
        details = event.get("details") or {}
        subject = details.get("code") or details.get("tool") or details.get("to") or ""
        line += f" · {event['event']}" + (f" {subject}" if subject else "")
    return line


def follow(client: RunnerClient, run_id: str, *, timeout: float, progress: Progress) -> RunInfo:
    """Report each change of the run to ``progress`` until it settles (terminal or waiting
    for a person) or ``timeout`` seconds pass; the last state seen."""
    deadline = time.monotonic() + timeout
    info = client.get_run(run_id)
    seen: int | None = None
    while True:
        if info.version != seen:
            seen = info.version
            events = client.trace(run_id)
            progress.show(progress_line(info, events[-1] if events else None))
        left = deadline - time.monotonic()
        if info.status in SETTLED or left <= 0:
            return info
        info = client.wait_change(run_id, version=info.version, timeout=left)
