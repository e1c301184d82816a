"""The FastAPI application of ``warrant serve``: :func:`create_app`.

Routes: ``/v1/runs…`` (:mod:`~warrant.runner.server.http.runs`), the actions on runs, handoffs
and memory (:mod:`~warrant.runner.server.http.actions`), and here ``/v1/tokens/me``,
``/metrics`` and ``/healthz``; the browser pages under ``/ui``
(:mod:`~warrant.runner.server.web`). The OpenAPI document is at ``/openapi.json`` (``/docs``).

``/healthz`` runs each check in a thread of its own with a deadline, so a peer that went silent
(no answer, no reset) makes the check fail after :data:`CHECK_TIMEOUT_S` instead of hanging it.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response

from warrant.ledger.db import ping
from warrant.runner.authz import Action, Identity
from warrant.runner.client.api import Client
from warrant.runner.client.tokens import Tokens
from warrant.runner.server import web
from warrant.runner.server.http import actions, errors, proposals, runs
from warrant.runner.server.http.auth import Deps, authenticated, deps, requires
from warrant.runner.server.http.errors import ERROR_RESPONSES
from warrant.runner.server.http.models import Health, HealthCheck, IdentityOut
from warrant.runner.server.metrics import metrics_response
from warrant.runner.settings import load_settings
from warrant.runner.spec import RunSpec

__all__ = ["API_VERSION", "CHECK_TIMEOUT_S", "check_broker", "create_app", "health"]

API_VERSION = "1"

DESCRIPTION = """The warrant runner over HTTP: start runs, read them, wait for them, and act
on them as a person (confirm, decline, answer, cancel, grant, pre-approve, resolve handoffs).

Every request but `/healthz` carries `Authorization: Bearer <token>` (`warrant token create
NAME --role producer|approver|operator|viewer`). Who acted is always the token's label. Every
error is `{"error": {"code", "message"}}` with a stable code."""


def create_app(*, client: Any = None, tokens: Any = None) -> FastAPI:
    """The API over ``client`` (default :meth:`Client.from_env`) and ``tokens`` (default the
    token service on the client's engine)."""
    settings = load_settings()  # a bad setting stops the server here: SETTINGS_INVALID
    if client is None:
        client = Client.from_env(service_name="warrant-serve", database_only=True)
    if tokens is None:
        tokens = Tokens(client.engine)
    app = FastAPI(title="warrant", version=API_VERSION, description=DESCRIPTION)
    app.state.deps = Deps(client=client, tokens=tokens, operator_token=settings.operator_token)
    errors.install(app)
    app.include_router(runs.router)
    app.include_router(actions.router)
    app.include_router(proposals.router)
    _system_routes(app)

    web.install(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _system_routes(app: FastAPI) -> None:
    @app.get(
        "/v1/tokens/me",
        response_model=IdentityOut,
        tags=["tokens"],
        summary="Who this token is",
        responses={401: ERROR_RESPONSES[401], 503: ERROR_RESPONSES[503]},
    )
    def whoami(identity: Annotated[Identity, Depends(authenticated)]) -> IdentityOut:
        return IdentityOut(
            token_id=identity.token_id,
            name=identity.name,
            role=str(identity.role),
            label=identity.label,
        )

    @app.get(
        "/metrics",
        tags=["system"],
        summary="Prometheus metrics",
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
            **{k: ERROR_RESPONSES[k] for k in (401, 403, 503)},
        },
    )
    def metrics(
        request: Request, identity: Annotated[Identity, Depends(requires(Action.READ))]
    ) -> Response:
        body, content_type = metrics_response(deps(request).client.engine)
        return Response(content=body, media_type=content_type)

    @app.get(
        "/healthz",
        response_model=Health,
        tags=["system"],
        summary="Can this server reach the broker and the ledger?",
        responses={503: {"model": Health, "description": "The broker or the ledger is down."}},
    )
    def healthz(request: Request) -> Any:
        from warrant.broker.app import app as celery_app  # lazy: builds Celery from the settings

        report = health(deps(request).client.engine, celery_app)
        return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)


#: How long one health check may take before it counts as failed.
CHECK_TIMEOUT_S = 3.0

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="warrant-health")


def _timed(probe: Any, *, timeout: float) -> HealthCheck:
    started = time.monotonic()
    future = _pool.submit(probe)
    try:
        future.result(timeout=timeout)
    except FutureTimeout:
        return HealthCheck(
            ok=False, latency_ms=round(timeout * 1000, 1), error=f"no answer within {timeout:g} s"
        )
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        error = f"{type(exc).__name__}: {first}"[:300]
        return HealthCheck(ok=False, latency_ms=_ms(started), error=error)
    return HealthCheck(ok=True, latency_ms=_ms(started))


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


def check_broker(app: Any, *, timeout: float = CHECK_TIMEOUT_S) -> HealthCheck:
    """A fresh connection to the broker (not the publisher's pooled one: it may be a socket
    to a server that is gone), opened and closed."""

    def probe() -> None:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            conn.default_channel  # noqa: B018 - the channel proves the server answered

    return _timed(probe, timeout=timeout)


def health(engine: Any, app: Any) -> dict[str, Any]:
    """``{"status": "ok" | "unavailable", "broker": HealthCheck, "database": HealthCheck}``."""
    broker, database = check_broker(app), _timed(lambda: ping(engine), timeout=CHECK_TIMEOUT_S)
    return {
        "status": "ok" if broker.ok and database.ok else "unavailable",
        "broker": broker.model_dump(),
        "database": database.model_dump(),
    }


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated document, with the run spec's schema (``RunSpec`` and its parts) among
    the components: ``POST /v1/runs`` reads its body itself, to answer ``SPEC_INVALID`` with
    the spec's own field errors."""
    if app.openapi_schema:
        return app.openapi_schema

    document = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    spec = RunSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in spec.pop("$defs", {}).items():
        schemas.setdefault(name, schema)
    schemas["RunSpec"] = spec
    app.openapi_schema = document
    return document
