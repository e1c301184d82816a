"""A client of a remote ``warrant serve`` (its ``/v1`` HTTP API), with an API token.

:class:`RemoteClient` is a :class:`~warrant.runner.client.contract.RunnerClient`, as
:class:`~warrant.runner.client.api.Client` is: the same methods, signatures and records, so
``make_client()`` can hand out either (``WARRANT_SERVER_URL`` picks this one). Who acted is
always the token's identity, recorded by the server: the ``by``/``granted_by``/``approved_by``
arguments are accepted for the same signature and ignored, as are ``origin`` (the server
records the address it saw), ``operator_token`` (the token's role is checked instead) and
``publish``/``started_by``.

An error response ``{"error": {"code", "message"}}`` is raised again as the
:class:`~warrant.runner.errors.WarrantError` subclass its HTTP status stands for, keeping the
server's ``code`` (:func:`error_from`), so the CLI's exit codes and ``--json`` errors are
those of the database-backed client. A server that cannot be reached raises
:class:`~warrant.runner.errors.ServiceUnavailable` ``SERVER_UNREACHABLE``.
"""

from __future__ import annotations

import json as jsonlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import tenacity

from warrant.runner.client.approvals import Corrected, Origin
from warrant.runner.client.contract import DEFAULT_INBOX_LIMIT, RunnerClient
from warrant.runner.client.inbox import CitedObservation, Parameter, PendingConfirmation, Revealed
from warrant.runner.client.runs import SETTLED, RunInfo
from warrant.runner.errors import (
    BrokerUnavailable,
    ConfirmationRefused,
    Forbidden,
    HandoffNotFound,
    InvalidRequest,
    MemoryNotFound,
    NotFound,
    RunNotFound,
    ServiceUnavailable,
    SpecError,
    StateConflict,
    TokenInvalid,
    Unauthorized,
    WarrantError,
)
from warrant.runner.external import Decision
from warrant.runner.spec import RunSpec, Usage

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "MAX_POLL_S",
    "PREFIX_SCAN",
    "PROPOSE_ATTEMPTS",
    "RemoteClient",
    "error_from",
    "remote_from_settings",
]

#: How many times a proposal is sent when the server cannot be reached or its answer is lost
#: (always under the same ``Idempotency-Key``: the server records it once).
PROPOSE_ATTEMPTS = 4

#: The longest one ``/wait`` long poll is asked to last (the server allows up to 60 s).
MAX_POLL_S = 30.0

#: How many of the newest runs an id prefix is matched against over the API (which has no
#: prefix query): an older run needs its whole id.
PREFIX_SCAN = 2000

#: The length of a whole id (a UUID's text): no prefix of anything else.
WHOLE_ID = 36

_BY_STATUS: dict[int, type[WarrantError]] = {
    400: InvalidRequest,
    401: TokenInvalid,
    403: Forbidden,
    404: NotFound,
    409: StateConflict,
    422: InvalidRequest,
    503: ServiceUnavailable,
}
_BY_STATUS_AND_CODE: dict[tuple[int, str], type[WarrantError]] = {
    (403, "OPERATOR_TOKEN_INVALID"): Unauthorized,
    (404, "RUN_NOT_FOUND"): RunNotFound,
    (404, "HANDOFF_NOT_FOUND"): HandoffNotFound,
    (404, "MEMORY_NOT_FOUND"): MemoryNotFound,
    (409, "RUN_NOT_WAITING_CONFIRMATION"): ConfirmationRefused,
}


def error_from(status: int, payload: Any) -> WarrantError:
    """The :class:`WarrantError` an error response of ``status`` stands for (its code kept)."""
    body = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(body, dict):
        body = {}
    code = str(body.get("code") or f"HTTP_{status}")
    message = str(body.get("message") or f"the server answered {status}")
    if status in (400, 422) and code == "SPEC_INVALID":
        return SpecError(message, errors=list(body.get("errors") or []))
    if status == 503 and code == "BROKER_UNAVAILABLE" and body.get("run_id"):
        return BrokerUnavailable(message, run_id=str(body["run_id"]))
    if status == 409 and code.startswith("CONFIRMATION_"):
        return ConfirmationRefused(message, code=code)
    kind = _BY_STATUS_AND_CODE.get((status, code)) or _BY_STATUS.get(status, WarrantError)
    return kind(message, code=code)


R = TypeVar("R", bound="DataclassInstance")


def _record(cls: type[R], data: dict[str, Any], **values: Any) -> R:
    """One of the client's records (a dataclass) from an API body: the fields it does not
    know are left out; ``values`` replace the body's."""
    known = {f.name for f in fields(cls)}
    return cls(**{**{k: v for k, v in data.items() if k in known}, **values})


def run_info(data: dict[str, Any]) -> RunInfo:
    """A :class:`RunInfo` from a ``RunOut`` body."""
    return _record(RunInfo, data, pre_approvals=list(data.get("pre_approvals") or []))


class RemoteClient:
    """The run operations of ``warrant serve`` at ``base_url`` (``http://host:port``), with
    an API token (``Authorization: Bearer``). Thread-safe as far as :class:`httpx.Client` is."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """The JSON of a 2xx answer; an error answer raises its :class:`WarrantError`."""
        try:
            r = self._http.request(
                method,
                "/v1" + path,
                json=json,
                params={k: v for k, v in (params or {}).items() if v is not None},
                headers=headers,
                timeout=timeout if timeout is not None else self.timeout,
            )
        except httpx.TransportError as exc:
            raise ServiceUnavailable(
                f"warrant server {self.base_url} cannot be reached: {exc or type(exc).__name__}",
                code="SERVER_UNREACHABLE",
            ) from None
        try:
            payload = r.json()
        except ValueError:
            payload = None
        if r.is_success:
            return payload
        raise error_from(r.status_code, payload)

    # --- runs ----------------------------------------------------------------------------

    def start_run(
        self,
        spec: RunSpec | dict[str, Any] | str,
        *,
        publish: bool = True,
        idempotency_key: str | None = None,
        started_by: str | None = None,
    ) -> str:
        """``POST /v1/runs`` (the server publishes, and records the token's label)."""
        if isinstance(spec, str):
            try:
                spec = jsonlib.loads(spec)
            except ValueError as exc:
                raise InvalidRequest(
                    f"the spec is not JSON: {exc}", code="REQUEST_INVALID"
                ) from None
        elif isinstance(spec, RunSpec):
            spec = spec.model_dump(mode="json")
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        data = self._call("POST", "/runs", json=spec, headers=headers)
        return str(data["run_id"])

    def fork_run(
        self,
        run_id: str,
        *,
        at: int,
        spec_patch: dict[str, Any] | None = None,
        publish: bool = True,
        started_by: str | None = None,
    ) -> str:
        """``POST /v1/runs/{run_id}/fork`` (the server publishes, and records the token's
        label)."""
        body: dict[str, Any] = {"at": at}
        if spec_patch is not None:
            body["spec_patch"] = spec_patch
        return str(self._call("POST", f"/runs/{run_id}/fork", json=body)["run_id"])

    def get_run(self, run_id: str) -> RunInfo:
        return run_info(self._call("GET", f"/runs/{run_id}"))

    def list_runs(self, *, limit: int = 50, status: str | None = None) -> list[RunInfo]:
        """The server pages by 200 at most; more pages are followed."""
        runs: list[RunInfo] = []
        cursor: str | None = None
        while len(runs) < limit:
            params = {"limit": min(200, limit - len(runs)), "status": status, "cursor": cursor}
            page = self._call("GET", "/runs", params=params)
            runs.extend(run_info(r) for r in page["runs"])
            cursor = page.get("next_cursor")
            if not cursor:
                break
        return runs

    def ids_like(self, key: str, *, kind: str = "run", min_length: int = 6) -> list[str]:
        """Over the API: a whole run id is asked for, a prefix is looked for among the newest
        :data:`PREFIX_SCAN` runs (handoffs: among runs handed off, whose ids the server's
        handoff routes accept)."""
        whole = len(key) >= WHOLE_ID
        if kind == "run":
            try:
                return [self.get_run(key).run_id]
            except RunNotFound:
                if whole:
                    return []
        elif whole:
            return [key]  # the server's handoff routes say if there is one
        if len(key) < min_length:
            return []
        status = "handoff" if kind == "handoff" else None
        runs = self.list_runs(limit=PREFIX_SCAN, status=status)
        return [r.run_id for r in runs if r.run_id.startswith(key)][:2]

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/runs/{run_id}/trace")["events"]

    def observations(self, run_id: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/runs/{run_id}/observations")["observations"]

    def working_memory(self, run_id: str) -> dict[str, Any]:
        return self._call("GET", f"/runs/{run_id}/view")

    def budgets(self, run_id: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/runs/{run_id}/budgets")["budgets"]

    def wait(
        self, run_id: str, *, timeout: float = 60.0, until: frozenset[str] | set[str] | None = None
    ) -> RunInfo:
        """Long polls of ``GET /v1/runs/{id}/wait`` (:meth:`wait_change`) until the run
        settles, or reaches one of ``until``, or ``timeout`` passes; the last state seen."""
        targets = until or SETTLED
        deadline = time.monotonic() + timeout
        version: int | None = None
        while True:
            info = self.wait_change(
                run_id, version=version, timeout=max(0.0, deadline - time.monotonic())
            )
            if info.status in targets or time.monotonic() >= deadline:
                return info
            if info.status in SETTLED and version == info.version:
                time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
            version = info.version

    def wait_change(self, run_id: str, *, version: int | None, timeout: float) -> RunInfo:
        """One long poll of at most :data:`MAX_POLL_S`."""
        poll = round(min(MAX_POLL_S, max(0.0, timeout)), 3)
        data = self._call(
            "GET",
            f"/runs/{run_id}/wait",
            params={"version": version, "timeout": poll},
            timeout=poll + self.timeout,
        )
        return run_info(data)

    def cancel(self, run_id: str, *, by: str, reason: str = "", revoke: bool = True) -> RunInfo:
        """The server revokes."""
        return run_info(self._call("POST", f"/runs/{run_id}/cancel", json={"reason": reason}))

    def policy_tools(self, *, seen_within_s: float) -> frozenset[str] | None:
        """``None``: the HTTP API does not show the workers' registrations (the server's
        gate decides, and a fixture plan is checked against this process's registry)."""
        return None

    # --- people's actions ----------------------------------------------------------------

    def confirm(
        self,
        run_id: str,
        *,
        proposal_hash: str,
        by: str,
        origin: Origin | None = None,
        precondition: str | None = None,
    ) -> int:
        return self._decide(run_id, "confirm", proposal_hash, precondition=precondition)

    def decline(
        self, run_id: str, *, proposal_hash: str, by: str, origin: Origin | None = None
    ) -> int:
        return self._decide(run_id, "decline", proposal_hash)

    def decide(
        self,
        run_id: str,
        *,
        approve: Sequence[str] = (),
        decline: Sequence[str] = (),
        by: str,
        origin: Origin | None = None,
        seen: Mapping[str, str] | None = None,
    ) -> int:
        body = {"approve": list(approve), "decline": list(decline), "seen": dict(seen or {})}
        return int(self._call("POST", f"/runs/{run_id}/decisions", json=body)["version"])

    def correct(
        self,
        run_id: str,
        *,
        proposal_hash: str,
        changes: Mapping[str, Any],
        by: str,
        reason: str = "",
        origin: Origin | None = None,
    ) -> Corrected:
        body = {"proposal_hash": proposal_hash, "changes": dict(changes), "reason": reason}
        return Corrected(**self._call("POST", f"/runs/{run_id}/correct", json=body))

    def _decide(
        self, run_id: str, action: str, proposal_hash: str, *, precondition: str | None = None
    ) -> int:
        body = {"proposal_hash": proposal_hash}
        if precondition is not None:
            body["precondition"] = precondition
        return int(self._call("POST", f"/runs/{run_id}/{action}", json=body)["version"])

    def answer(self, run_id: str, *, text: str, by: str) -> RunInfo:
        return run_info(self._call("POST", f"/runs/{run_id}/answer", json={"text": text}))

    def add_grant(
        self,
        run_id: str,
        *,
        capability: str,
        resource_scope: str = "*",
        expires_at_step: int | None = None,
        max_uses: int | None = None,
        granted_by: str,
        operator_token: str | None = None,
        destinations_from: list[str] | None = None,
        expires_at: datetime | None = None,
        expires_in_s: float | None = None,
        widen: bool = False,
        constraints: dict[str, Any] | None = None,
    ) -> int:
        """An operator token's role is needed."""
        body = {
            "capability": capability,
            "resource_scope": resource_scope,
            "expires_at_step": expires_at_step,
            "max_uses": max_uses,
            **({"destinations_from": destinations_from} if destinations_from is not None else {}),
            "expires_at": expires_at.isoformat() if expires_at is not None else None,
            "expires_in_s": expires_in_s,
            "widen": widen,
            **({"constraints": constraints} if constraints is not None else {}),
        }
        return int(self._call("POST", f"/runs/{run_id}/grants", json=body)["grant_id"])

    def pre_approve(
        self,
        run_id: str,
        *,
        tool: str,
        tool_version: str,
        arguments: dict[str, Any],
        approved_by: str,
        operator_token: str | None = None,
    ) -> int:
        body = {"tool": tool, "tool_version": tool_version, "arguments": arguments}
        data = self._call("POST", f"/runs/{run_id}/pre-approvals", json=body)
        return int(data["pre_approval_id"])

    def reveal(self, run_id: str, *, by: str = "", origin: Origin | None = None) -> Revealed | None:
        """``GET /v1/runs/{id}?reveal=true``: a token that may confirm (else ``Forbidden``
        ``REVEAL_FORBIDDEN``); the server traces the token's identity and the address it saw."""
        shown = self._call("GET", f"/runs/{run_id}", params={"reveal": "true"}).get("revealed")
        return _record(Revealed, shown) if shown else None

    def pending_confirmations(
        self, *, reveal_sensitive: bool, limit: int = DEFAULT_INBOX_LIMIT
    ) -> list[PendingConfirmation]:
        """``reveal_sensitive``: a token whose role may confirm, else ``REVEAL_FORBIDDEN``."""
        params = {"reveal_sensitive": "true" if reveal_sensitive else "false", "limit": limit}
        return [
            _record(
                PendingConfirmation,
                p,
                parameters=[Parameter(**x) for x in p.get("parameters") or []],
                cited=[CitedObservation(**c) for c in p.get("cited") or []],
            )
            for p in self._call("GET", "/confirmations", params=params)["confirmations"]
        ]

    # --- handoffs ------------------------------------------------------------------------

    def handoffs(self, *, open_only: bool = True, limit: int = 50) -> list[dict[str, Any]]:
        params = {"open_only": "true" if open_only else "false", "limit": limit}
        return self._call("GET", "/handoffs", params=params)["handoffs"]

    def handoff(self, handoff_id: str) -> dict[str, Any]:
        return self._call("GET", f"/handoffs/{handoff_id}")

    def resolve_handoff(self, handoff_id: str, *, outcome: str, by: str, reason: str) -> RunInfo:
        body = {"outcome": outcome, "reason": reason}
        return run_info(self._call("POST", f"/handoffs/{handoff_id}/resolve", json=body))

    # --- a caller's proposals (the proposer is the token's label) ------------------------

    def propose(
        self,
        run_id: str,
        proposal: dict[str, Any],
        *,
        by: str = "",
        step: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
        wait_s: float = 0.0,
        call_id: str | None = None,
    ) -> Decision:
        """``POST /v1/runs/{id}/proposals``, then (with ``wait_s``) its long poll. Sent with
        ``call_id`` (a fresh key without one) as its ``Idempotency-Key``, and sent again
        under it, up to :data:`PROPOSE_ATTEMPTS` times, when the server cannot be reached or
        the answer is lost: the server records the proposal once and answers each time."""
        if isinstance(usage, Usage):
            usage = usage.model_dump()
        body = {"proposal": proposal, "step": step, "usage": usage}
        poll = min(wait_s, MAX_POLL_S)
        headers = {"Idempotency-Key": call_id or f"remote-{uuid.uuid4().hex}"}
        for attempt in tenacity.Retrying(
            retry=tenacity.retry_if_exception(_unreachable),
            wait=tenacity.wait_exponential(multiplier=0.2, max=2.0),
            stop=tenacity.stop_after_attempt(PROPOSE_ATTEMPTS),
            reraise=True,
        ):
            with attempt:
                data = self._call(
                    "POST",
                    f"/runs/{run_id}/proposals",
                    json={k: v for k, v in body.items() if v is not None},
                    params={"wait": poll},
                    headers=headers,
                    timeout=poll + 30.0,
                )
        decision = _record(Decision, data)
        if wait_s > poll and decision.state == "pending":
            return self.decision(
                run_id, decision.step, branch=decision.branch, wait_s=wait_s - poll
            )
        return decision

    def decision(
        self,
        run_id: str,
        step: int,
        *,
        branch: int = 0,
        wait_s: float = 0.0,
        seen: str = "pending",
    ) -> Decision:
        """``GET /v1/runs/{id}/proposals/{step}``, long-polled in pieces of at most
        :data:`MAX_POLL_S` until its state is not ``seen`` or ``wait_s`` passed."""
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            poll = min(MAX_POLL_S, max(0.0, deadline - time.monotonic()))
            data = self._call(
                "GET",
                f"/runs/{run_id}/proposals/{step}",
                params={"wait": round(poll, 3), "seen": seen, "branch": branch},
                timeout=poll + 30.0,
            )
            decision = _record(Decision, data)
            if decision.state != seen or time.monotonic() >= deadline:
                return decision

    # --- long-term memory (an operator token's role) -------------------------------------

    def memory_records(
        self, subject: str, *, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        params = {"subject": subject, "include_inactive": "true" if include_inactive else "false"}
        return self._call("GET", "/memory", params=params)["records"]

    def revoke_memory(self, record_id: int, *, by: str) -> dict[str, Any]:
        return self._call("DELETE", f"/memory/{record_id}")

    # --- the tools' kill switch (an operator token's role) --------------------------------

    def disable_tool(self, name: str, *, by: str, reason: str = "") -> dict[str, Any]:
        return self._call("POST", "/tools/disable", json={"tool": name, "reason": reason})

    def enable_tool(self, name: str, *, by: str) -> dict[str, Any]:
        return self._call("POST", "/tools/enable", json={"tool": name})

    # --- the deployment policy (the server's own hash; approving: an operator token's role) -

    def policy(self) -> dict[str, Any]:
        return self._call("GET", "/policy")

    def approve_policy(
        self, policy_hash: str, *, by: str, note: str | None = None
    ) -> dict[str, Any]:
        body = {"policy_hash": policy_hash, "note": note}
        return self._call("POST", "/policy/approvals", json=body)

    # --- replay and policy review (the server's policy decides) -------------------------

    def replay_run(
        self, run_id: str, *, candidate: dict[str, Any] | None = None, by: str | None = None
    ) -> dict[str, Any]:
        return self._call("POST", f"/runs/{run_id}/replay", json={"candidate": candidate})

    def policy_diff(
        self, *, since_s: float, candidate: dict[str, Any] | None = None, limit: int = 1000
    ) -> dict[str, Any]:
        body = {"since_s": since_s, "candidate": candidate, "limit": limit}
        return self._call("POST", "/policy/diff", json=body)


def remote_from_settings(settings: Any) -> RemoteClient | None:
    """A client of ``settings.server_url`` with ``settings.api_token`` (none set: ``None``; a
    URL without a token: ``TokenInvalid``)."""
    if not settings.server_url:
        return None
    if not settings.api_token:
        raise TokenInvalid("WARRANT_SERVER_URL is set: WARRANT_API_TOKEN must name an API token")
    return RemoteClient(settings.server_url, settings.api_token)


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, ServiceUnavailable) and exc.code == "SERVER_UNREACHABLE"


_conforms: type[RunnerClient] = RemoteClient
