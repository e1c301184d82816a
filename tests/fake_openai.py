"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 (a real HTTP server).

Replies are scripted per model name, in order; each script item is a reply or a fault:

``{"call": (name, arguments)}``   one function call (``arguments`` a dict, or raw text)
``{"calls": [(name, args), ...]}`` several function calls
``{"text": "..."}``               plain text, no function call
``{"status": 429, "retry_after": 1}`` / ``{"status": 500}`` / ``{"status": 400}``
``{"delay": 5, ...}``             wait before answering (to be cut by a deadline)
``usage`` (optional) on any reply: ``{"prompt_tokens": n, "completion_tokens": m}``

``in_flight`` and ``peak_in_flight`` count the requests being answered at once.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    def __init__(self) -> None:
        self.scripts: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak_in_flight = 0
        self.abandoned = 0
        """Requests whose client closed the connection before the scripted delay ended."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                with server.lock:
                    server.in_flight += 1
                    server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
                try:
                    self._answer()
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _left_within(self, delay: float) -> bool:
                """Wait ``delay`` seconds; True as soon as the client closes its connection
                (it gave up on the call: a cancelled request)."""
                end = time.monotonic() + delay
                while (left := end - time.monotonic()) > 0:
                    readable, _, _ = select.select([self.connection], [], [], left)
                    if readable and not self.connection.recv(1, socket.MSG_PEEK):
                        return True
                    if readable:  # data, not a close: nothing to learn; just wait
                        time.sleep(left)
                return False

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    server.requests.append(
                        {
                            "path": self.path,
                            "body": body,
                            "authorization": self.headers.get("authorization"),
                            "at": time.monotonic(),
                        }
                    )
                    script = server.scripts.get(body.get("model"), [])
                    item = script.pop(0) if script else {"text": "script exhausted"}
                if item.get("delay") and self._left_within(item["delay"]):
                    with server.lock:
                        server.abandoned += 1
                    return
                status = item.get("status", 200)
                if status != 200:
                    self.send_response(status)
                    if item.get("retry_after") is not None:
                        self.send_header("Retry-After", str(item["retry_after"]))
                    self.send_header("content-type", "application/json")
                    self.end_headers()
                    self.wfile.write(json.dumps({"error": {"message": "scripted"}}).encode())
                    return
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(_reply(item)).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def script(self, model: str, items: list[dict[str, Any]]) -> None:
        with self.lock:
            self.scripts[model] = list(items)

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["body"].get("model") == model]

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


#: Unique per reply, as a real endpoint's are (the OpenAI Agents SDK refuses a reused call id).
_REPLIES = itertools.count()


def _call(index: int, name: str, arguments: Any, reply: int = 0) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": f"call_{reply}_{index}",
        "type": "function",
        "function": {"name": name, "arguments": text},
    }


def _reply(item: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": item.get("text")}
    reply = next(_REPLIES)
    if "call" in item:
        message["tool_calls"] = [_call(0, *item["call"], reply)]
    if "calls" in item:
        calls = enumerate(item["calls"])
        message["tool_calls"] = [_call(i, name, args, reply) for i, (name, args) in calls]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": item.get(
            "usage", {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        ),
    }
