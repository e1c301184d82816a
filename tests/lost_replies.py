"""Answers lost on their way back, as a proxy or a broken pipe loses them: the request reaches
the server, the server does the work and answers, and the caller never sees the answer.

* :class:`LossyProxy`: a TCP proxy in front of an HTTP server. A request whose bytes hold
  ``marker`` (``b"/proposals"``, ``b'"tools/call"'``) is forwarded; the server's answer is read
  and thrown away until it holds ``answered`` (the answer is complete enough to show the server
  did the work), then both connections are closed: the caller sees the connection drop.
* ``python -m tests.lost_replies -- CMD ...``: the same for a stdio MCP server. It runs ``CMD``
  and relays its stdin and stdout line by line, dropping the answers to the first ``--drop``
  ``tools/call`` requests of every run of ``--every`` such requests.
* :class:`ApproverBot`: a person who approves every call of a run that waits for one, on the
  run's exact proposal hash, with an approver's client (never the agent's).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

__all__ = ["ApproverBot", "LossyProxy"]


class LossyProxy:
    """Listens on ``127.0.0.1:<port>`` and forwards to ``upstream``; see the module."""

    def __init__(self, upstream: tuple[str, int], *, marker: bytes, answered: bytes) -> None:
        self.upstream = upstream
        self.marker = marker
        self.answered = answered
        self.to_drop = 0
        """How many more matching answers to lose (set by the test)."""
        self.dropped = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def drop(self, n: int = 1) -> None:
        with self._lock:
            self.to_drop = n

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def __enter__(self) -> LossyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(downstream,), daemon=True).start()

    def _serve(self, downstream: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=60)
        except OSError:
            downstream.close()
            return
        doomed = threading.Event()
        threading.Thread(
            target=self._requests, args=(downstream, upstream, doomed), daemon=True
        ).start()
        self._answers(upstream, downstream, doomed)

    def _requests(
        self, downstream: socket.socket, upstream: socket.socket, doomed: threading.Event
    ) -> None:
        """Caller → server, watching for the marker (a request may come in several reads)."""
        seen = b""
        try:
            while data := downstream.recv(65536):
                seen = (seen + data)[-65536:]
                if self.marker in seen and not doomed.is_set():
                    with self._lock:
                        if self.to_drop > 0:
                            self.to_drop -= 1
                            doomed.set()
                    seen = b""
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _shut(upstream)

    def _answers(
        self, upstream: socket.socket, downstream: socket.socket, doomed: threading.Event
    ) -> None:
        """Server → caller; a doomed connection's answer is read to its end mark, then lost."""
        lost = b""
        try:
            while data := upstream.recv(65536):
                if not doomed.is_set():
                    downstream.sendall(data)
                    continue
                lost = (lost + data)[-65536:]
                if self.answered in lost:
                    with self._lock:
                        self.dropped += 1
                    break
        except OSError:
            pass
        finally:
            for s in (downstream, upstream):
                _shut(s)
                s.close()


def _shut(s: socket.socket) -> None:
    with suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)


class ApproverBot:
    """Confirms each call that waits for a person in the runs of ``subject`` (an approver's
    ``client``)."""

    def __init__(
        self, client: Any, subject: str, *, by: str = "approver-bot", patience_s: float = 0.0
    ) -> None:
        self.client = client
        self.subject = subject
        self.by = by
        self.patience_s = patience_s
        """How long a request waits before the bot decides (a person takes a while)."""
        self.confirmed: list[str] = []
        self._seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @contextmanager
    def running(self) -> Iterator[ApproverBot]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            for pending in self.client.pending_confirmations(reveal_sensitive=False):
                if pending.subject != self.subject:
                    continue
                first = self._seen.setdefault(pending.proposal_hash, time.monotonic())
                if time.monotonic() - first < self.patience_s:
                    continue
                try:
                    self.client.confirm(
                        pending.run_id, proposal_hash=pending.proposal_hash, by=self.by
                    )
                    self.confirmed.append(pending.proposal_hash)
                except Exception:  # decided meanwhile (a retry, a decline): the next look says
                    continue


# --- the stdio relay ---------------------------------------------------------------------------


def _relay(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lost_replies")
    parser.add_argument("--drop", type=int, default=1)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    calls: dict[Any, int] = {}  # tools/call request id -> its number (0, 1, ...)
    lock = threading.Lock()

    def down() -> None:
        assert child.stdin is not None
        for line in sys.stdin.buffer:
            message = _parsed(line)
            if message.get("method") == "tools/call" and "id" in message:
                with lock:
                    calls[message["id"]] = len(calls)
            child.stdin.write(line)
            child.stdin.flush()
        child.stdin.close()

    threading.Thread(target=down, daemon=True).start()
    for line in child.stdout:
        message = _parsed(line)
        with lock:
            number = calls.get(message.get("id")) if "method" not in message else None
        if number is not None and number % args.every < args.drop:
            print(f"lost-replies: dropped the answer to request {message['id']}", file=sys.stderr)
            continue
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return child.wait()


def _parsed(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


if __name__ == "__main__":
    sys.exit(_relay(sys.argv[1:]))
