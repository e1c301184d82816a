"""A fake weather service with a message endpoint and fault injection (standard library only).

Endpoints (JSON in and out):

- ``GET /weather?city=X``: a deterministic forecast for ``X`` (400 without a city);
- ``POST /messages`` with header ``Idempotency-Key`` and body ``{"to": ..., "text": ...}``:
  stores one message per key (201; the same key again returns the stored message with 200,
  with a different body 409);
- ``GET /messages[?key=K]``: the stored messages;
- ``POST /faults`` ``{"mode": "fail"|"slow"|"unavailable", "times": n, "path": "/weather",
  "delay_s": 2.0}``: the next ``n`` requests (to ``path`` if given, never to ``/faults`` or
  ``/health``) answer 503 (``fail``), are delayed (``slow``) or have their connection closed
  without an answer (``unavailable``); ``times: 0`` clears;
- ``GET /health``.

State is kept in memory, or in a JSON file with ``--state FILE``. Run it with
``python -m warrant_weather.service --port 8765``, or in a thread with :class:`WeatherService`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import signal
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["CONDITIONS", "WeatherService", "forecast", "main"]

CONDITIONS = ("sunny", "cloudy", "rain", "showers", "snow", "fog", "wind")
FAULT_MODES = ("fail", "slow", "unavailable")
ADMIN_PATHS = ("/faults", "/health")


def forecast(city: str) -> dict[str, Any]:
    """The forecast for ``city``: the same city always gets the same answer."""
    digest = hashlib.sha256(city.strip().lower().encode()).digest()
    return {
        "city": city.strip(),
        "conditions": CONDITIONS[digest[0] % len(CONDITIONS)],
        "temperature_c": digest[1] % 36 - 5,
        "wind_kph": digest[2] % 60,
        "precipitation_mm": round((digest[3] % 200) / 10, 1),
    }


@dataclass
class _Fault:
    mode: str
    times: int
    path: str | None = None
    delay_s: float = 2.0


class _State:
    """Messages and the current fault, behind one lock; optionally mirrored to a JSON file."""

    def __init__(self, path: Path | None) -> None:
        self.lock = threading.Lock()
        self.path = path
        self.messages: list[dict[str, Any]] = []
        self.fault: _Fault | None = None
        if path is not None and path.exists():
            self.messages = json.loads(path.read_text())["messages"]

    def save(self) -> None:
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"messages": self.messages}))
            tmp.replace(self.path)

    def take_fault(self, path: str) -> _Fault | None:
        with self.lock:
            fault = self.fault
            if fault is None or path in ADMIN_PATHS:
                return None
            if fault.path is not None and fault.path != path:
                return None
            fault.times -= 1
            if fault.times <= 0:
                self.fault = None
            return fault


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    # --- plumbing --------------------------------------------------------------------------

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return None

    def _faulted(self, path: str) -> bool:
        """Apply an injected fault; True when the request must not be handled."""
        fault = self.server.state.take_fault(path)
        if fault is None:
            return False
        if fault.mode == "slow":
            time.sleep(fault.delay_s)
            return False
        if fault.mode == "fail":
            self._send(503, {"error": "injected failure"})
            return True
        self.close_connection = True  # "unavailable": hang up without an answer
        return True

    # --- routes ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if self._faulted(url.path):
            return
        if url.path == "/health":
            self._send(200, {"ok": True})
        elif url.path == "/weather":
            city = (query.get("city") or [""])[0]
            if not city.strip() or len(city) > 80:
                self._send(400, {"error": "city is required (at most 80 characters)"})
            else:
                self._send(200, forecast(city))
        elif url.path == "/messages":
            keys = query.get("key")
            key = keys[0] if keys else None
            with self.server.state.lock:
                found = [m for m in self.server.state.messages if key is None or m["key"] == key]
            self._send(200, {"messages": found})
        else:
            self._send(404, {"error": f"no route {url.path}"})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        body = self._body()
        if self._faulted(url.path):
            return
        if url.path == "/faults":
            self._post_fault(body)
        elif url.path == "/messages":
            self._post_message(body)
        else:
            self._send(404, {"error": f"no route {url.path}"})

    def _post_fault(self, body: Any) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("times", 1), int):
            self._send(400, {"error": "expected {mode, times, path?, delay_s?}"})
            return
        state = self.server.state
        times = body.get("times", 1)
        with state.lock:
            if times <= 0:
                state.fault = None
            elif body.get("mode") in FAULT_MODES:
                state.fault = _Fault(
                    mode=body["mode"],
                    times=times,
                    path=body.get("path"),
                    delay_s=float(body.get("delay_s", 2.0)),
                )
            else:
                self._send(400, {"error": f"mode must be one of {', '.join(FAULT_MODES)}"})
                return
        self._send(200, {"fault": body if times > 0 else None})

    def _post_message(self, body: Any) -> None:
        key = self.headers.get("Idempotency-Key", "").strip()
        if not key:
            self._send(400, {"error": "header Idempotency-Key is required"})
            return
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("to"), str)
            or not isinstance(body.get("text"), str)
            or not body["to"]
        ):
            self._send(400, {"error": "expected {to, text}"})
            return
        state = self.server.state
        with state.lock:
            for message in state.messages:
                if message["key"] == key:
                    if (message["to"], message["text"]) != (body["to"], body["text"]):
                        self._send(409, {"error": "idempotency key reused with another body"})
                    else:
                        self._send(200, {**message, "duplicate": True})
                    return
            message = {
                "message_id": f"msg_{len(state.messages) + 1}",
                "key": key,
                "to": body["to"],
                "text": body["text"],
            }
            state.messages.append(message)
            state.save()
        self._send(201, {**message, "duplicate": False})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State


class WeatherService:
    """The service in a background thread: ``with WeatherService() as svc: svc.url``."""

    def __init__(
        self, *, host: str = "127.0.0.1", port: int = 0, state_file: Path | None = None
    ) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.state = _State(state_file)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> WeatherService:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="weather-service", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> WeatherService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def messages(self) -> list[dict[str, Any]]:
        """The stored messages (a copy)."""
        with self._server.state.lock:
            return [dict(m) for m in self._server.state.messages]

    def inject(
        self, mode: str, times: int = 1, *, path: str | None = None, delay_s: float = 2.0
    ) -> None:
        """The same as ``POST /faults``."""
        if mode not in FAULT_MODES:
            raise ValueError(f"mode must be one of {', '.join(FAULT_MODES)}")
        with self._server.state.lock:
            self._server.state.fault = (
                _Fault(mode=mode, times=times, path=path, delay_s=delay_s) if times > 0 else None
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake weather service for warrant examples.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--state", type=Path, default=None, help="keep messages in this file")
    args = parser.parse_args(argv)
    service = WeatherService(host=args.host, port=args.port, state_file=args.state)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with service:
        print(f"weather service on {service.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


if __name__ == "__main__":
    main()
