"""The HTTP layer without services: error statuses and shape, roles, the cursor, text checks
(a fake client and token service; tests/integration/test_http_api.py runs the real stack)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from warrant.ledger.repo import StaleVersion
from warrant.runner.authz import Identity, Role
from warrant.runner.errors import (
    BrokerUnavailable,
    ConfirmationRefused,
    Forbidden,
    HandoffNotFound,
    InvalidRequest,
    PluginError,
    RunNotFound,
    ServiceUnavailable,
    SpecError,
    TokenInvalid,
    Unauthorized,
)
from warrant.runner.server.http import create_app
from warrant.runner.server.http.errors import status_for
from warrant.runner.server.http.models import bad_text
from warrant.runner.server.http.runs import decode_cursor, encode_cursor


class FakeTokens:
    def authenticate(self, token: str) -> Identity:
        try:
            return Identity(token_id=token, name=token, role=Role(token))
        except ValueError:
            raise TokenInvalid("unknown or revoked API token") from None


class FakeClient:
    engine = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.raises: Exception | None = None

    def confirm(self, run_id: str, **kw: Any) -> int:
        self.calls.append(("confirm", {"run_id": run_id, **kw}))
        if self.raises:
            raise self.raises
        return 7

    def get_run(self, run_id: str) -> Any:
        """After a decision: the run no longer waits for that proposal (all approvals in)."""
        from types import SimpleNamespace

        return SimpleNamespace(confirmation_request=None)


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


class Http:
    """Requests to the app in this process (httpx over ASGI; the threadpool runs as served)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as c:
                return await c.request(method, url, **kw)

        return asyncio.run(go())

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)


@pytest.fixture
def http(fake: FakeClient) -> Http:
    return Http(create_app(client=fake, tokens=FakeTokens()))


def confirm(http: Http, token: str | None, body: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return http.post("/v1/runs/r-1/confirm", json=body, headers=headers)


def test_statuses_follow_the_error_classes() -> None:
    assert status_for(TokenInvalid("x")) == 401
    assert status_for(Forbidden("x")) == status_for(Unauthorized("x")) == 403
    assert status_for(InvalidRequest("x")) == status_for(SpecError("x", errors=[])) == 422
    assert status_for(RunNotFound("x")) == status_for(HandoffNotFound("x")) == 404
    assert status_for(StaleVersion("x")) == status_for(ConfirmationRefused("x")) == 409
    assert (
        status_for(ServiceUnavailable("x")) == status_for(BrokerUnavailable("x", run_id="r")) == 503
    )
    assert status_for(PluginError("x")) == 500


def test_the_identity_is_the_tokens_label_never_the_bodys(http, fake) -> None:
    r = confirm(http, "approver", {"proposal_hash": "h"})
    assert r.json() == {
        "run_id": "r-1",
        "decision": "approved",
        "version": 7,
        "waiting_for_more": False,
    }
    [(name, call)] = fake.calls
    origin = call.pop("origin")
    assert (name, call) == (
        "confirm",
        {"run_id": "r-1", "proposal_hash": "h", "by": "approver (approver)", "precondition": None},
    )
    assert (origin.via, origin.address) == ("api", "127.0.0.1")  # traced beside who
    r = confirm(http, "approver", {"proposal_hash": "h", "by": "mallory"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "REQUEST_INVALID")


@pytest.mark.parametrize(
    ("token", "status", "code"),
    [(None, 401, "TOKEN_INVALID"), ("nobody", 401, "TOKEN_INVALID"), ("viewer", 403, "FORBIDDEN")],
)
def test_who_may_not_is_refused_before_the_client_is_called(http, fake, token, status, code):
    r = confirm(http, token, {"proposal_hash": "h"})
    assert (r.status_code, r.json()["error"]["code"]) == (status, code)
    assert fake.calls == []


def test_client_errors_keep_their_code(http, fake) -> None:
    fake.raises = ConfirmationRefused("no", code="CONFIRMATION_HASH_MISMATCH")
    r = confirm(http, "operator", {"proposal_hash": "h"})
    assert r.status_code == 409
    assert r.json() == {"error": {"code": "CONFIRMATION_HASH_MISMATCH", "message": "no"}}
    fake.raises = RuntimeError("a bug")
    r = confirm(http, "operator", {"proposal_hash": "h"})
    assert (r.status_code, r.json()["error"]["code"]) == (500, "INTERNAL_ERROR")


def test_unparsable_and_unstorable_bodies_are_request_invalid(http) -> None:
    headers = {"Authorization": "Bearer operator", "Content-Type": "application/json"}
    for raw in (
        b"\xff\xfe",
        b"{",
        b'{"proposal_hash": "a\\u0000b"}',
        b'{"proposal_hash": "\\ud800"}',
    ):
        r = http.post("/v1/runs/r-1/confirm", content=raw, headers=headers)
        assert (r.status_code, r.json()["error"]["code"]) == (422, "REQUEST_INVALID"), raw
    r = http.get("/v1/runs/a%2Fb", headers=headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"


def test_the_cursor_round_trips_and_refuses_anything_else() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert decode_cursor(encode_cursor(at, "run-1")) == (at, "run-1")
    for bad in ("", "!!", "bm9wZQ", "WzEsMl0", "WyIyMDI2LTAxLTAyVDAzOjA0OjA1IiwicnVuIl0"):
        with pytest.raises(InvalidRequest) as caught:
            decode_cursor(bad)
        assert caught.value.code == "CURSOR_INVALID"


def test_bad_text_finds_what_postgresql_cannot_store() -> None:
    assert bad_text({"a": ["ok", 1, None, {"b": "fine"}]}) is None
    assert bad_text({"a": ["x\x00"]}) and bad_text({"\x00": 1}) and bad_text(["\udc80"])


def test_the_openapi_document_describes_every_operation(http) -> None:
    doc = http.get("/openapi.json").json()
    assert doc["paths"]["/v1/runs"]["post"]["requestBody"]["content"]["application/json"] == {
        "schema": {"$ref": "#/components/schemas/RunSpec"}
    }
    assert "Grant" in doc["components"]["schemas"] and "RunSpec" in doc["components"]["schemas"]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if path not in ("/healthz", "/openapi.json"):
                assert "401" in op["responses"], (method, path)


def test_a_run_spec_is_read_up_to_its_limit(http) -> None:
    headers = {"Authorization": "Bearer producer", "Content-Type": "application/json"}
    big = b'{"goal": "' + b"x" * 1_000_001 + b'"}'
    r = http.post("/v1/runs", content=big, headers=headers)
    assert (r.status_code, r.json()["error"]["code"]) == (413, "REQUEST_TOO_LARGE")
    for raw in (b"NaN", b'{"goal": Infinity}', b"[" * 100_000):  # what the CLI says of a file
        r = http.post("/v1/runs", content=raw, headers=headers)
        assert (r.status_code, r.json()["error"]["code"]) == (422, "SPEC_INVALID"), raw[:20]
