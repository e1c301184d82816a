"""Model calls go through the environment's proxy (``HTTP_PROXY``, ``NO_PROXY``), looked up
once per endpoint, on a real loopback proxy that answers as the endpoint would."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from warrant.runner.planners import _model_http


class _Proxy(http.server.BaseHTTPRequestHandler):
    """A forward proxy that answers every request itself and records its target."""

    seen: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append(self.path)  # absolute-form: the URL the client wanted
        body = b'{"proxied": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[str]:
    _Proxy.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_model_call_goes_through_the_environments_proxy(proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    url = "http://model-behind-a-proxy.invalid/v1/chat/completions"
    for _ in range(2):  # the second call uses the proxy found for the first
        response = _model_http.post(url, body=b"{}", headers={}, timeout=5)
        assert response.status_code == 200 and response.json() == {"proxied": True}
    assert _Proxy.seen == [url, url]


def test_no_proxy_names_an_endpoint_reached_directly(proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("NO_PROXY", "127.0.0.2")
    with socket.socket() as closed:  # a loopback port nobody listens on
        closed.bind(("127.0.0.2", 0))
        url = f"http://127.0.0.2:{closed.getsockname()[1]}/v1/chat/completions"
    with pytest.raises(ConnectionError):  # refused, and the proxy was not asked
        _model_http.post(url, body=b"{}", headers={}, timeout=5)
    assert _Proxy.seen == []
