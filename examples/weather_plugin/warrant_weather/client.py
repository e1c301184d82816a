"""What the weather tools see as ``ctx.deps``: one ``httpx.Client`` per worker process.

HTTP outcomes become the tool contract's typed errors:

- a connection that could not be made, a timeout of a read, a 5xx → ``ToolFailed``
  (``retryable=True``; the worker retries with backoff, the same idempotency token);
- a 4xx → ``ToolRejected`` (the planner sees it; retrying would not help);
- a write whose request may have reached the service but got no answer → ``ToolUnknown``
  (the reconciler asks the service about the idempotency token).
"""

from __future__ import annotations

from typing import Any

import httpx

from warrant.tools import ToolFailed, ToolRejected, ToolUnknown

__all__ = ["URL_SECRET", "WeatherClient"]

#: The secret (an environment variable of the worker) holding the service's base URL.
URL_SECRET = "WEATHER_SERVICE_URL"


class WeatherClient:
    """A thin, typed wrapper around the service's HTTP API."""

    def __init__(self, base_url: str, *, transport: httpx.BaseTransport | None = None) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=10.0, transport=transport)

    def close(self) -> None:
        """Called by the worker at shutdown (the deps object has ``close()``)."""
        self.http.close()

    def get_weather(self, city: str, *, timeout_s: float) -> dict[str, Any]:
        try:
            response = self.http.get("/weather", params={"city": city}, timeout=timeout_s)
        except httpx.TransportError as exc:  # nothing was changed: a read is safe to retry
            raise ToolFailed(f"weather service unreachable: {exc!r}", retryable=True) from exc
        return _json(response)

    def send_message(self, *, key: str, to: str, text: str, timeout_s: float) -> dict[str, Any]:
        try:
            response = self.http.post(
                "/messages",
                json={"to": to, "text": text},
                headers={"Idempotency-Key": key},
                timeout=timeout_s,
            )
        except httpx.ConnectError as exc:  # never reached the service: known not applied
            raise ToolFailed(f"message service unreachable: {exc!r}", retryable=True) from exc
        except httpx.TransportError as exc:  # sent, no answer: it may have been stored
            raise ToolUnknown(f"no answer from the message service: {exc!r}") from exc
        return _json(response)

    def find_message(self, key: str, *, timeout_s: float = 5.0) -> dict[str, Any] | None:
        """The message stored under an idempotency key, if any (for verify and reconcile)."""
        try:
            response = self.http.get("/messages", params={"key": key}, timeout=timeout_s)
        except httpx.TransportError as exc:
            raise ToolFailed(f"message service unreachable: {exc!r}", retryable=True) from exc
        messages = _json(response)["messages"]
        return messages[0] if messages else None


def _json(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 500:
        retry_after = response.headers.get("Retry-After")
        raise ToolFailed(
            f"service error {response.status_code}",
            retryable=True,
            retry_after_s=float(retry_after) if retry_after else None,
        )
    if response.status_code >= 400:
        try:
            reason = response.json().get("error", "")
        except ValueError:
            reason = response.text[:200]
        raise ToolRejected(f"service refused the request ({response.status_code}): {reason}")
    body: dict[str, Any] = response.json()
    return body
