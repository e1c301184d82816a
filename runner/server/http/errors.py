"""Errors as HTTP responses: every one is ``{"error": {"code", "message"}}``.

A :class:`~warrant.runner.errors.WarrantError` keeps its code; its class picks the status
(:func:`status_for`). A request FastAPI cannot validate is ``422 REQUEST_INVALID`` with the
field errors; an unknown path or method keeps its 404/405 under this same shape. A database
that cannot be reached is ``503 DATABASE_UNAVAILABLE``; a value the database refuses is bad
input (``422 REQUEST_INVALID``), never a server error.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from warrant.runner.codes import ErrorCode
from warrant.runner.errors import (
    ConfirmationRefused,
    InvalidRequest,
    NotFound,
    ServiceUnavailable,
    SpecError,
    StateConflict,
    TokenInvalid,
    Unauthorized,
    WarrantError,
)
from warrant.runner.server.http.models import ErrorBody

__all__ = ["ERROR_RESPONSES", "install", "status_for", "warrant_error_response"]

log = logging.getLogger("warrant.http")

#: The statuses by error class, most specific first.
_STATUSES: tuple[tuple[type[WarrantError] | tuple[type[WarrantError], ...], int], ...] = (
    (TokenInvalid, 401),
    (Unauthorized, 403),  # FORBIDDEN; OPERATOR_TOKEN_INVALID
    ((InvalidRequest, SpecError), 422),
    (NotFound, 404),
    ((StateConflict, ConfirmationRefused), 409),
    (ServiceUnavailable, 503),
)

#: What every authenticated operation may answer besides its success (the OpenAPI document).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "TOKEN_INVALID: no token, or an unknown one"},
    403: {"model": ErrorBody, "description": "FORBIDDEN: the token's role may not do this"},
    404: {"model": ErrorBody, "description": "No such run, handoff or memory record"},
    409: {"model": ErrorBody, "description": "The request does not fit the run's state"},
    422: {"model": ErrorBody, "description": "REQUEST_INVALID, SPEC_INVALID or another code"},
    503: {"model": ErrorBody, "description": "The database or the broker cannot be reached"},
}


#: Codes whose status is not their class's.
_STATUS_BY_CODE: dict[str, int] = {ErrorCode.REQUEST_TOO_LARGE: 413}


def status_for(exc: WarrantError) -> int:
    """The HTTP status of ``exc`` (500 for an error that is no caller's fault)."""
    if exc.code in _STATUS_BY_CODE:
        return _STATUS_BY_CODE[exc.code]
    for classes, status in _STATUSES:
        if isinstance(exc, classes):
            return status
    return 500


def error_response(status: int, body: dict[str, Any], **headers: str) -> JSONResponse:
    return JSONResponse({"error": body}, status_code=status, headers=headers or None)


def _field(loc: Any) -> str:
    return ".".join(str(part) for part in loc)


def warrant_error_response(exc: WarrantError) -> JSONResponse:
    """``exc`` in the error shape, at its status (the API's and the MCP gateway's)."""
    status = status_for(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    return error_response(status, exc.to_dict(), **headers)


def _on_warrant_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, WarrantError)
    if status_for(exc) == 500:
        log.error("%s %s failed: [%s] %s", request.method, request.url.path, exc.code, exc)
    return warrant_error_response(exc)


def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"field": _field(e.get("loc", ())), "message": str(e.get("msg", ""))} for e in exc.errors()
    ]
    fields = ", ".join(e["field"] for e in errors) or "(request)"
    body = {"code": "REQUEST_INVALID", "message": f"invalid request: {fields}", "errors": errors}
    return error_response(422, body)


def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's and FastAPI's own refusals: 404 and 405 keep their status; a body that
    cannot be parsed (400) is bad input like any other (422)."""
    assert isinstance(exc, StarletteHTTPException)
    codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
    status = 422 if exc.status_code == 400 else exc.status_code
    code = codes.get(status, "REQUEST_INVALID" if status < 500 else "HTTP_ERROR")
    headers = dict(exc.headers or {})
    return error_response(status, {"code": code, "message": str(exc.detail)}, **headers)


def _on_database_refused(request: Request, exc: Exception) -> JSONResponse:
    """A value the database cannot store (a number out of its column's range, …): the
    request's fault; the validation in front of it should have refused it."""
    log.warning("%s %s: the database refused a value: %s", request.method, request.url.path, exc)
    message = str(exc).splitlines()[0] if str(exc) else "value refused by the database"
    return error_response(422, {"code": "REQUEST_INVALID", "message": message})


def _on_database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """The ledger cannot be reached: 503 (its address and the driver's words go to the log)."""
    log.warning("%s %s: the database cannot be reached: %s", request.method, request.url.path, exc)
    body = {"code": "DATABASE_UNAVAILABLE", "message": "the database cannot be reached"}
    return error_response(503, body)


def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    """A bug: 500, still in the error shape (the traceback goes to the server's log)."""
    return error_response(500, {"code": "INTERNAL_ERROR", "message": "internal server error"})


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(Exception, _on_unexpected)
    app.add_exception_handler(WarrantError, _on_warrant_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(DataError, _on_database_refused)
    app.add_exception_handler(psycopg.DataError, _on_database_refused)  # raw-statement writes
    app.add_exception_handler(OperationalError, _on_database_unavailable)
