"""Webhook signatures, and the start-time check that a deployment can sign at all.

Every webhook call is a JSON ``POST`` with three headers:

* ``X-Warrant-Timestamp``: Unix seconds when the call was signed;
* ``X-Warrant-Signature``: ``sha256=<hex>``, the HMAC-SHA256 with the deployment's
  ``WARRANT_WEBHOOK_SECRET`` of ``<timestamp>.`` followed by the raw body bytes (the
  timestamp is signed too, so an old call cannot be replayed as a new one);
* ``X-Warrant-Delivery``: the delivery's id, the same on every retry of one call (a receiver
  deduplicates by it).

A receiver checks a call with :func:`verify` on the raw body, before parsing it.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from warrant.runner.errors import SpecError
from warrant.runner.settings import WarrantSettings
from warrant.runner.spec import RunSpec

__all__ = [
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "TOLERANCE_S",
    "check_webhook",
    "headers",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "X-Warrant-Signature"
TIMESTAMP_HEADER = "X-Warrant-Timestamp"
DELIVERY_HEADER = "X-Warrant-Delivery"
#: How far a call's timestamp may be from the receiver's clock (seconds) by default.
TOLERANCE_S = 300.0


def sign(secret: str, body: bytes, timestamp: int | str) -> str:
    """``sha256=<hex>`` of ``<timestamp>.<body>`` keyed with ``secret``."""
    message = str(timestamp).encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(
    secret: str,
    body: bytes,
    timestamp: int | str | None,
    signature: str | None,
    *,
    now: float | None = None,
    tolerance_s: float | None = TOLERANCE_S,
) -> bool:
    """Whether ``signature`` signs ``body`` at ``timestamp`` with ``secret`` and the timestamp
    is within ``tolerance_s`` of ``now`` (``None``: any age). Constant-time comparison."""
    if not signature or timestamp is None:
        return False
    try:
        ts = int(str(timestamp))
    except ValueError:
        return False
    if tolerance_s is not None:
        current = time.time() if now is None else now
        if abs(current - ts) > tolerance_s:
            return False
    return hmac.compare_digest(sign(secret, body, ts), signature)


def headers(secret: str, body: bytes, *, delivery_id: int, timestamp: int) -> dict[str, str]:
    """The headers of one signed call."""
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(secret, body, timestamp),
        TIMESTAMP_HEADER: str(timestamp),
        DELIVERY_HEADER: str(delivery_id),
    }


def check_webhook(spec: RunSpec, settings: WarrantSettings) -> None:
    """Refuse (``SPEC_INVALID`` naming ``webhook``) a spec with a webhook on a deployment that
    has no ``WARRANT_WEBHOOK_SECRET``: its calls could not be signed."""
    if spec.webhook is not None and not settings.webhook_secret:
        raise SpecError(
            "invalid run spec: webhook",
            errors=[
                {
                    "field": "webhook",
                    "message": "this deployment sends no webhooks "
                    "(WARRANT_WEBHOOK_SECRET is not set)",
                }
            ],
        )
