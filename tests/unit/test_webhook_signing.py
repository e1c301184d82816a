"""Webhook signatures and the start-time check (pure)."""

from __future__ import annotations

import pytest

from warrant.runner.errors import SpecError
from warrant.runner.settings import WarrantSettings
from warrant.runner.spec import parse_run_spec
from warrant.runner.webhook_signing import check_webhook, headers, sign, verify

BODY = b'{"run_id":"r1","event":"ended"}'


def _spec(webhook: object = None) -> dict[str, object]:
    spec: dict[str, object] = {
        "goal": "g",
        "subject": "s",
        "planner": {"kind": "fixture", "outputs": []},
    }
    if webhook is not None:
        spec["webhook"] = webhook
    return spec


def test_a_signature_verifies_and_binds_body_timestamp_and_secret():
    sig = sign("k", BODY, 1000)
    assert sig.startswith("sha256=") and len(sig) == 7 + 64
    assert verify("k", BODY, "1000", sig, now=1000)
    assert not verify("k", BODY + b" ", 1000, sig, now=1000)
    assert not verify("k", BODY, 1001, sig, now=1000)
    assert not verify("other", BODY, 1000, sig, now=1000)
    assert not verify("k", BODY, 1000, None, now=1000)
    assert not verify("k", BODY, "soon", sig, now=1000)


def test_an_old_call_is_refused_unless_the_receiver_allows_any_age():
    sig = sign("k", BODY, 1000)
    assert not verify("k", BODY, 1000, sig, now=1000 + 301)
    assert verify("k", BODY, 1000, sig, now=1000 + 10_000, tolerance_s=None)


def test_headers_carry_signature_timestamp_and_delivery():
    h = headers("k", BODY, delivery_id=7, timestamp=1000)
    assert h["X-Warrant-Delivery"] == "7" and h["X-Warrant-Timestamp"] == "1000"
    assert verify("k", BODY, h["X-Warrant-Timestamp"], h["X-Warrant-Signature"], now=1000)


def test_a_webhook_needs_the_deployments_secret():
    spec = parse_run_spec(_spec({"url": "https://example.test/hook"}))
    with pytest.raises(SpecError) as caught:
        check_webhook(spec, WarrantSettings(webhook_secret=None))
    assert caught.value.code == "SPEC_INVALID"
    assert [e["field"] for e in caught.value.errors] == ["webhook"]
    check_webhook(spec, WarrantSettings(webhook_secret="k"))
    check_webhook(parse_run_spec(_spec()), WarrantSettings(webhook_secret=None))


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.test/x",
        "example.test/hook",
        "http://",
        "https://a b/",
        "https://a/" + "x" * 2000,
    ],
)
def test_only_http_urls_are_accepted(url):
    with pytest.raises(SpecError) as caught:
        parse_run_spec(_spec({"url": url}))
    assert caught.value.errors[0]["field"].startswith("webhook")


def test_the_secret_is_not_part_of_a_spec():
    with pytest.raises(SpecError):
        parse_run_spec(_spec({"url": "https://example.test/hook", "secret": "k"}))
