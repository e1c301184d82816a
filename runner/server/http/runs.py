"""``/v1/runs``: start a run, list them, read one (state, trace, working memory) and long-poll
for its next change."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from warrant.ledger import reads
from warrant.ledger.db import retry_once_on_disconnect, session_scope
from warrant.runner.authz import Action, Identity
from warrant.runner.client.contract import DEFAULT_INBOX_LIMIT
from warrant.runner.client.idempotency import origin as run_origin
from warrant.runner.client.idempotency import run_for_key
from warrant.runner.client.runs import SETTLED, RunInfo
from warrant.runner.codes import RunStatus
from warrant.runner.errors import InvalidRequest, RunNotFound, SpecError
from warrant.runner.server.http.auth import Deps, Reader, check_may_reveal, deps, origin, requires
from warrant.runner.server.http.errors import ERROR_RESPONSES
from warrant.runner.server.http.models import (
    INT32_MAX,
    BudgetsOut,
    ConfirmationsOut,
    ErrorBody,
    ForkIn,
    ObservationsOut,
    RevealedOut,
    RunOut,
    RunPage,
    TraceEventOut,
    TraceOut,
    bad_text,
)
from warrant.runner.spec import MAX_SPEC_BYTES, parse_run_spec

__all__ = ["RunId", "decode_cursor", "encode_cursor", "long_poll", "router", "run_out"]

router = APIRouter(prefix="/v1", tags=["runs"], responses=ERROR_RESPONSES)

#: A run id in a path (uuids; anything else is refused before the ledger is asked).
RunId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="The run's id.")]
NO_NUL = r"^[^\x00]*$"

#: The largest run spec accepted (bytes of JSON).
#: The longest a long poll waits, and its pauses between two looks at the ledger.
MAX_WAIT_S, FIRST_PAUSE_S, MAX_PAUSE_S = 60.0, 0.05, 1.0


def run_out(info: RunInfo) -> RunOut:
    return RunOut.model_validate(info.to_dict())


_SPEC_BODY = {
    "requestBody": {
        "required": True,
        "description": "The run spec (the same JSON as `warrant run start`).",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunSpec"}}},
    }
}


@router.post(
    "/runs",
    status_code=201,
    response_model=RunOut,
    summary="Start a run",
    openapi_extra=_SPEC_BODY,
    responses={
        200: {"model": RunOut, "description": "The Idempotency-Key named a run of this spec"},
        409: {"model": ErrorBody, "description": "IDEMPOTENCY_KEY_REUSED with another spec"},
        413: {"model": ErrorBody, "description": "REQUEST_TOO_LARGE: a spec over 1,000,000 bytes"},
        422: {"model": ErrorBody, "description": "SPEC_INVALID (with errors), REQUEST_INVALID"},
    },
)
async def start_run(
    request: Request,
    identity: Annotated[Identity, Depends(requires(Action.START_RUN))],
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=r"^[!-~]{1,200}$",
            description="The same key with the same spec returns the same run (200).",
        ),
    ] = None,
) -> JSONResponse:
    """Validate, record and enqueue a run; ``started_by`` is the token's label."""
    spec = _json_body(await _bounded_body(request))
    info, created = await run_in_threadpool(_start, deps(request), spec, idempotency_key, identity)
    return JSONResponse(run_out(info).model_dump(mode="json"), status_code=201 if created else 200)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def _bounded_body(request: Request) -> bytes:
    """The body, read no further than :data:`MAX_SPEC_BYTES` (``REQUEST_TOO_LARGE``)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_SPEC_BYTES:
            raise InvalidRequest(
                f"a run spec is at most {MAX_SPEC_BYTES} bytes", code="REQUEST_TOO_LARGE"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _json_body(raw: bytes) -> Any:
    """The request's run spec as JSON: ``SPEC_INVALID`` if it is none, or holds text no run
    can keep (as the CLI says of a spec file)."""
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        said = f"not JSON: {exc}"
        raise SpecError(f"invalid run spec: {said}", errors=_root(said)) from None
    unstorable = bad_text(data)
    if unstorable:
        raise SpecError(f"invalid run spec: {unstorable}", errors=_root(unstorable))
    return data


def _root(problem: str) -> list[dict[str, str]]:
    return [{"field": "(root)", "message": problem}]


def _start(d: Deps, data: Any, key: str | None, identity: Identity) -> tuple[RunInfo, bool]:
    spec = parse_run_spec(data)
    start = run_origin(spec, idempotency_key=key, started_by=identity.label)
    existed = run_for_key(d.client.engine, start) is not None  # IDEMPOTENCY_KEY_REUSED: 409
    run_id = d.client.start_run(spec, idempotency_key=key, started_by=identity.label)
    return d.client.get_run(run_id), not existed


@router.post(
    "/runs/{run_id}/fork",
    status_code=201,
    response_model=RunOut,
    summary="Fork a run",
    responses={
        404: {"model": ErrorBody, "description": "RUN_NOT_FOUND"},
        422: {
            "model": ErrorBody,
            "description": "FORK_STEP_INVALID, FORK_SOURCE_INVALID (a replay), SPEC_INVALID "
            "(the patched spec), REQUEST_INVALID",
        },
    },
)
def fork_run(
    request: Request,
    run_id: RunId,
    body: ForkIn,
    identity: Annotated[Identity, Depends(requires(Action.START_RUN))],
) -> JSONResponse:
    """Start a new live run (``kind`` fork) from the run's record before step ``at``: its
    observations, proposals, commands and outcomes before it copied, its budgets and grant
    uses so far carried; the fork plans step ``at`` live. ``started_by`` is the token's
    label. The new run, as ``POST /v1/runs`` returns it."""
    client = deps(request).client
    fork_id = client.fork_run(
        run_id, at=body.at, spec_patch=body.spec_patch, started_by=identity.label
    )
    return JSONResponse(run_out(client.get_run(fork_id)).model_dump(mode="json"), status_code=201)


@router.get("/runs", response_model=RunPage, summary="List runs")
def list_runs(
    request: Request,
    identity: Reader,
    status: Annotated[RunStatus | None, Query(description="Only runs at this status.")] = None,
    subject: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
    created_since: Annotated[
        datetime | None, Query(description="ISO 8601; without an offset, UTC.")
    ] = None,
    tool: Annotated[
        str | None, Query(max_length=200, pattern=NO_NUL, description="Runs that proposed it.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=500, description="next_cursor of the previous page.")
    ] = None,
) -> RunPage:
    """The newest runs first, by (created_at, id), one page at a time."""
    if created_since is not None and created_since.tzinfo is None:
        created_since = created_since.replace(tzinfo=UTC)
    before = decode_cursor(cursor) if cursor else None
    with session_scope(deps(request).client.engine) as s:
        rows = reads.runs_page(
            s,
            limit=limit,
            status=status.value if status else None,
            subject=subject,
            created_since=created_since,
            tool=tool,
            before=before,
        )
        runs = [run_out(RunInfo.of(r)) for r in rows]
        last = (rows[-1].created_at, rows[-1].id) if len(rows) == limit else None
    return RunPage(runs=runs, next_cursor=encode_cursor(*last) if last else None)


@router.get(
    "/runs/{run_id}",
    response_model=RunOut,
    summary="One run",
    responses={
        403: {
            "model": ErrorBody,
            "description": "FORBIDDEN: the token may not read; REVEAL_FORBIDDEN: "
            "?reveal=true by a role that may not confirm (producer, viewer)",
        }
    },
)
def get_run(
    request: Request,
    run_id: RunId,
    identity: Reader,
    reveal: Annotated[
        bool,
        Query(
            description="Add `revealed`: the pending proposal's sensitive values (a role that "
            "may confirm only, else 403 REVEAL_FORBIDDEN; traced as sensitive.revealed)."
        ),
    ] = False,
) -> RunOut:
    """The run's state. ``confirmation_request`` masks sensitive arguments for everyone; an
    approver or operator asks ``?reveal=true`` to see what they would approve."""
    client = deps(request).client
    if not reveal:
        return run_out(client.get_run(run_id))
    check_may_reveal(identity)
    out = run_out(client.get_run(run_id))
    revealed = client.reveal(run_id, by=identity.label, origin=origin(request, "api"))
    if revealed is not None:
        out.revealed = RevealedOut.model_validate(revealed.to_dict())
    return out


@router.get("/runs/{run_id}/trace", response_model=TraceOut, summary="A run's timeline")
def get_trace(request: Request, run_id: RunId, identity: Reader) -> TraceOut:
    events = deps(request).client.trace(run_id)
    return TraceOut(run_id=run_id, events=[TraceEventOut.model_validate(e) for e in events])


@router.get("/runs/{run_id}/view", response_model=dict[str, Any], summary="Working memory")
def get_view(request: Request, run_id: RunId, identity: Reader) -> dict[str, Any]:
    """The planner's working-memory view for the run's next step, rebuilt from the ledger."""
    view: dict[str, Any] = deps(request).client.working_memory(run_id)
    return view


@router.get(
    "/runs/{run_id}/observations", response_model=ObservationsOut, summary="A run's observations"
)
def get_observations(request: Request, run_id: RunId, identity: Reader) -> ObservationsOut:
    """What the run observed, in order (the user's goal, tool outputs, answers, …); none for
    a run id the ledger does not hold (as ``Client.observations``)."""
    return ObservationsOut(run_id=run_id, observations=deps(request).client.observations(run_id))


@router.get("/runs/{run_id}/budgets", response_model=BudgetsOut, summary="A run's budgets")
def get_budgets(request: Request, run_id: RunId, identity: Reader) -> BudgetsOut:
    """What the run has used of each budget, and the limit (null: unlimited)."""
    return BudgetsOut(run_id=run_id, budgets=deps(request).client.budgets(run_id))


@router.get(
    "/confirmations",
    response_model=ConfirmationsOut,
    summary="Runs waiting for a confirmation",
    responses={
        403: {
            "model": ErrorBody,
            "description": "FORBIDDEN: the token may not read; REVEAL_FORBIDDEN: "
            "?reveal_sensitive=true by a role that may not confirm (producer, viewer)",
        }
    },
)
def pending_confirmations(
    request: Request,
    identity: Reader,
    reveal_sensitive: Annotated[
        bool,
        Query(description="Show sensitive values (a role that may confirm only, else 403)."),
    ] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = DEFAULT_INBOX_LIMIT,
) -> ConfirmationsOut:
    """The approval inbox: each run waiting for a person to approve exactly one proposal,
    longest waiting first, with the proposal's arguments (``secret_fields`` always masked;
    ``sensitive_fields`` masked unless ``reveal_sensitive``)."""
    if reveal_sensitive:
        check_may_reveal(identity)
    found = deps(request).client.pending_confirmations(
        reveal_sensitive=reveal_sensitive, limit=limit
    )
    return ConfirmationsOut(confirmations=found)


@router.get(
    "/runs/{run_id}/wait",
    response_model=RunOut,
    summary="Wait for a run's next change (long poll)",
    responses={200: {"headers": {"Warrant-Wait": {"schema": {"type": "string"}}}}},
)
async def wait_run(
    request: Request,
    response: Response,
    run_id: RunId,
    identity: Reader,
    version: Annotated[
        int | None,
        Query(ge=0, le=INT32_MAX, description="The version the caller has seen."),
    ] = None,
    timeout: Annotated[
        float, Query(ge=0, le=MAX_WAIT_S, allow_inf_nan=False, description="Seconds (≤ 60).")
    ] = 30.0,
) -> RunOut:
    """Returns as soon as the run's version differs from ``version`` or its status is settled
    (terminal, waiting for a confirmation or an answer, handed off), else after ``timeout``
    with the same state. The header ``Warrant-Wait`` says which: ``changed``, ``settled`` or
    ``timeout``. The server looks at the ledger with a growing pause (50 ms to 1 s)."""
    engine = deps(request).client.engine

    @retry_once_on_disconnect
    def look() -> tuple[str, int]:
        with session_scope(engine) as s:
            state = reads.run_state(s, run_id)
        if state is None:
            raise RunNotFound(f"no run {run_id}")
        return state

    def outcome(state: tuple[str, int]) -> str | None:
        if version is not None and state[1] != version:
            return "changed"
        return "settled" if state[0] in SETTLED else None

    deadline = time.monotonic() + timeout
    state = await long_poll(
        request, await run_in_threadpool(look), look, outcome, timeout, MAX_PAUSE_S
    )
    timed_out = "timeout" if time.monotonic() >= deadline else "disconnected"
    response.headers["Warrant-Wait"] = outcome(state) or timed_out
    return run_out(await run_in_threadpool(deps(request).client.get_run, run_id))


async def long_poll(
    request: Request,
    value: Any,
    look: Callable[[], Any],
    done: Callable[[Any], Any],
    timeout: float,
    max_pause: float,
    first_pause: float = FIRST_PAUSE_S,
) -> Any:
    """``value``, or ``look()`` again (in a thread, with a growing pause) until ``done`` of it,
    ``timeout`` seconds have passed or the caller went away: the last value seen."""
    deadline = time.monotonic() + timeout
    pause = first_pause
    while not done(value) and time.monotonic() < deadline:
        if await request.is_disconnected():
            break
        await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, max_pause)
        value = await run_in_threadpool(look)
    return value


# --- the opaque cursor of GET /v1/runs: the last (created_at, id) of a page ----------------


def encode_cursor(created_at: datetime, run_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position ``cursor`` names; ``422 CURSOR_INVALID`` if it names none."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, run_id = json.loads(raw)
        created_at = datetime.fromisoformat(at)
        if created_at.tzinfo is None or not isinstance(run_id, str) or "\x00" in run_id:
            raise ValueError("not a cursor")
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise InvalidRequest("cursor is not one this API returned", code="CURSOR_INVALID") from None
    return created_at, run_id
