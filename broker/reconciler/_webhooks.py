"""Webhook calls: the reconciler sweep's step that tells producers their run needs them.

Each sweep claims the pending deliveries that are due (:func:`warrant.ledger.webhooks.claim_due`,
a batch, ``SKIP LOCKED``; the claim pushes them a lease ahead and commits before any call),
sends them concurrently (a signed JSON ``POST``, :mod:`warrant.runner.webhook_signing`, timeout
``webhook_timeout_s``, no redirects), and records each attempt with its trace event on the run
(``webhook.delivered`` / ``webhook.failed``). A 2xx delivers; anything else — another status,
a timeout, a refused connection — is retried with full-jitter backoff until
``webhook_max_attempts``, then the delivery is ``failed``. Delivery is at least once: a receiver
deduplicates by ``X-Warrant-Delivery``.

Without ``WARRANT_WEBHOOK_SECRET`` the step does nothing (calls could not be signed); the rows
wait for a sweep that has it.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import orjson

from warrant.broker.context import StageContext
from warrant.ledger import webhooks
from warrant.ledger.db import session_scope
from warrant.ledger.repo import append_events
from warrant.runner.retry import backoff_delay
from warrant.runner.settings import WarrantSettings
from warrant.runner.views import request_as_shown
from warrant.runner.webhook_signing import headers

__all__ = ["Attempt", "WebhookReport", "body_of", "deliver_webhooks"]

log = logging.getLogger("warrant.webhooks")

#: Concurrent calls of one sweep.
MAX_PARALLEL = 8
#: How much of an error message or response body the ledger keeps.
ERROR_CHARS = 500


@dataclass
class WebhookReport:
    delivered: int = 0
    retried: int = 0
    failed: int = 0


@dataclass(frozen=True)
class Attempt:
    ok: bool
    status_code: int | None
    error: str | None


def body_of(d: webhooks.DueDelivery) -> bytes:
    """The call's JSON body: the event at the run's version, and the run as it is now."""
    payload = {
        "run_id": d.run_id,
        "version": d.run_version,
        "event": d.event,
        "status": d.status,
        "stop_reason": d.stop_reason,
        "confirmation_request": request_as_shown(d.confirmation_request)
        if d.event == "waiting"
        else None,
        "answer": d.answer if d.event == "ended" else None,
    }
    if d.event == webhooks.DECIDED:  # GET /v1/runs/{id}/proposals/{step}: the decision
        payload["step"] = d.step
    return orjson.dumps(payload)


def _send(http: httpx.Client, secret: str, d: webhooks.DueDelivery, now: float) -> Attempt:
    body = body_of(d)
    signed = headers(secret, body, delivery_id=d.id, timestamp=int(now))
    try:
        response = http.post(d.url, content=body, headers=signed)
    except httpx.HTTPError as exc:
        return Attempt(False, None, f"{type(exc).__name__}: {exc}"[:ERROR_CHARS])
    if response.is_success:
        return Attempt(True, response.status_code, None)
    return Attempt(False, response.status_code, f"HTTP {response.status_code}")


def deliver_webhooks(ctx: StageContext, settings: WarrantSettings) -> WebhookReport:
    """Send the due webhook calls (one batch) and record every attempt."""
    report = WebhookReport()
    secret = settings.webhook_secret
    if not secret:
        return report
    lease_s = settings.webhook_timeout_s * 2 + 30
    with session_scope(ctx.engine) as s:
        due = webhooks.claim_due(s, limit=settings.sweep_batch, lease_s=lease_s)
    if not due:
        return report
    now = ctx.clock()
    timeout = httpx.Timeout(settings.webhook_timeout_s)
    with (
        httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as http,
        ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(due))) as pool,
    ):
        attempts = list(pool.map(lambda d: _send(http, secret, d, now), due))
    for d, attempt in zip(due, attempts, strict=True):
        _record(ctx, settings, d, attempt, report)
    return report


def _record(
    ctx: StageContext,
    settings: WarrantSettings,
    d: webhooks.DueDelivery,
    attempt: Attempt,
    report: WebhookReport,
) -> None:
    number = d.attempts + 1
    retry_in = backoff_delay(
        number, base_s=settings.webhook_retry_base_s, cap_s=settings.webhook_retry_cap_s
    )
    with session_scope(ctx.engine) as s:
        recorded = webhooks.record_attempt(
            s,
            d.id,
            ok=attempt.ok,
            status_code=attempt.status_code,
            error=attempt.error,
            max_attempts=settings.webhook_max_attempts,
            retry_in_s=retry_in,
        )
        if recorded is None:
            return
        status, number = recorded
        details = {
            "delivery_id": d.id,
            "event": d.event,
            "version": d.run_version,
            "attempt": number,
            "status_code": attempt.status_code,
        }
        if attempt.ok:
            name = "webhook.delivered"
            report.delivered += 1
        else:
            name = "webhook.failed"
            final = status == "failed"
            details.update(error=attempt.error, final=final)
            if not final:
                details["retry_in_s"] = round(retry_in, 3)
            report.failed += final
            report.retried += not final
            log.warning("webhook %s of run %s: %s", d.id, d.run_id, attempt.error)
        append_events(s, d.run_id, [(name, details)], step=d.step)
