"""A client of a remote ``warrant serve`` (its ``/v1`` HTTP API), with an API token.

:class:`RemoteClient` is a :class:`~warrant.runner.client.contract.RunnerClient`, as
:class:`~warrant.runner.client.api.Client` is: the same methods, signatures and records, so
``make_client()`` can hand out either (``WARRANT_SERVER_URL`` picks this one). Who acted is
always the token's identity, recorded by the server: the ``by``/``granted_by``/``approved_by``
arguments are accepted for the same signature and ignored, as are ``operator_token`` (the
token's role is checked instead) and ``publish``/``started_by``.

An error response ``{"error": {"code", "message"}}`` is raised again as the
:class:`~warrant.runner.errors.WarrantError` subclass its HTTP status stands for, keeping the
server's ``code`` (:func:`error_from`), so the CLI's exit codes and ``--json`` errors are
those of the database-backed client. A server that cannot be reached raises
:class:`~warrant.runner.errors.ServiceUnavailable` ``SERVER_UNREACHABLE``.
"""

from __future__ import annotations

import json as jsonlib
import time
from dataclasses import fields
from datetime import datetime
from typing import Any

import httpx

from warrant.runner.client.approvals import Origin
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

__all__ = ["MAX_POLL_S", "PREFIX_SCAN", "RemoteClient", "error_from"]

#: The longest one ``/wait`` long poll is asked to last (the server allows up to 60 s).
MAX_POLL_S = 30.0

#: How many of the newest runs an id prefix is matched against over the API (which has no
#: prefix query): an older run needs its whole id.
PREFIX_SCAN = 2000

#: The length of a whole id (a UUID's text): no prefix of anything else.
WHOLE_ID = 36

_NOT_FOUND: dict[str, type[NotFound]] = {
    "RUN_NOT_FOUND": RunNotFound,
    "HANDOFF_NOT_FOUND": HandoffNotFound,
    "MEMORY_NOT_FOUND": MemoryNotFound,
}


def _conflict(code: str, message: str) -> WarrantError:
    if code.startswith("CONFIRMATION_") or code == "RUN_NOT_WAITING_CONFIRMATION":
        return ConfirmationRefused(message, code=code)
    return StateConflict(message, code=code)


def _invalid(code: str, message: str, body: dict[str, Any]) -> WarrantError:
    if code == "SPEC_INVALID":
        return SpecError(message, errors=list(body.get("errors") or []))
    return InvalidRequest(message, code=code)


def _unavailable(code: str, message: str, body: dict[str, Any]) -> WarrantError:
    if code == "BROKER_UNAVAILABLE" and body.get("run_id"):
        return BrokerUnavailable(message, run_id=str(body["run_id"]))
    return ServiceUnavailable(message, code=code)


def _forbidden(code: str, message: str) -> WarrantError:
    if code == "OPERATOR_TOKEN_INVALID":
        return Unauthorized(message, code=code)
    return Forbidden(message, code=code)


def error_from(status: int, payload: Any) -> WarrantError:
    """The :class:`WarrantError` an error response of ``status`` stands for (its code kept)."""
    body = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(body, dict):
        body = {}
    code = str(body.get("code") or f"HTTP_{status}")
    message = str(body.get("message") or f"the server answered {status}")
    if status == 401:
        return TokenInvalid(message, code=code)
    if status == 403:
        return _forbidden(code, message)
    if status == 404:
        return _NOT_FOUND.get(code, NotFound)(message, code=code)
    if status == 409:
        return _conflict(code, message)
    if status in (400, 422):
        return _invalid(code, message, body)
    if status == 503:
        return _unavailable(code, message, body)
    return WarrantError(message, code=code)


def run_info(data: dict[str, Any]) -> RunInfo:
    """A :class:`RunInfo` from a ``RunOut`` body (fields it does not know are left out)."""
    known = {f.name for f in fields(RunInfo)}
    values = {k: v for k, v in data.items() if k in known}
    values["pre_approvals"] = list(values.get("pre_approvals") or [])
    return RunInfo(**values)


# --- the reads and the memory methods: the records of Client, over /v1 ----------------------


class RemoteReads:
    _call: Any  # RemoteClient's transport

    def observations(self, run_id: str) -> list[dict[str, Any]]:
        """``GET /v1/runs/{id}/observations``: the run's observations in order."""
        found: list[dict[str, Any]] = self._call("GET", f"/runs/{run_id}/observations")[
            "observations"
        ]
        return found

    def budgets(self, run_id: str) -> list[dict[str, Any]]:
        """``GET /v1/runs/{id}/budgets``: each budget's ``name``, ``used`` and ``limit``."""
        rows: list[dict[str, Any]] = self._call("GET", f"/runs/{run_id}/budgets")["budgets"]
        return rows

    def pending_confirmations(
        self, *, reveal_sensitive: bool, limit: int = DEFAULT_INBOX_LIMIT
    ) -> list[PendingConfirmation]:
        """``GET /v1/confirmations``: the runs waiting for a confirmation, longest waiting
        first (``reveal_sensitive``: a token whose role may confirm, else
        ``REVEAL_FORBIDDEN``)."""
        params = {"reveal_sensitive": "true" if reveal_sensitive else "false", "limit": limit}
        data = self._call("GET", "/confirmations", params=params)
        return [pending_confirmation(p) for p in data["confirmations"]]

    def handoffs(self, *, open_only: bool = True, limit: int = 50) -> list[dict[str, Any]]:
        """``GET /v1/handoffs``: the runs handed to a person, newest first."""
        params = {"open_only": "true" if open_only else "false", "limit": limit}
        found: list[dict[str, Any]] = self._call("GET", "/handoffs", params=params)["handoffs"]
        return found

    def handoff(self, handoff_id: str) -> dict[str, Any]:
        """``GET /v1/handoffs/{id}``: one handoff (or the newest of a run, given its id)."""
        found: dict[str, Any] = self._call("GET", f"/handoffs/{handoff_id}")
        return found

    # --- long-term memory ----------------------------------------------------------------

    def memory_records(
        self, subject: str, *, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """``GET /v1/memory?subject=``: a subject's records (an operator token's role)."""
        params = {"subject": subject, "include_inactive": "true" if include_inactive else "false"}
        found: list[dict[str, Any]] = self._call("GET", "/memory", params=params)["records"]
        return found

    def revoke_memory(self, record_id: int, *, by: str) -> dict[str, Any]:
        """``DELETE /v1/memory/{id}``. ``by`` is ignored (the token's identity)."""
        revoked: dict[str, Any] = self._call("DELETE", f"/memory/{record_id}")
        return revoked


def pending_confirmation(data: dict[str, Any]) -> PendingConfirmation:
    """A :class:`PendingConfirmation` from a ``/v1/confirmations`` item."""
    known = {f.name for f in fields(PendingConfirmation)}
    values = {k: v for k, v in data.items() if k in known}
    values["parameters"] = [Parameter(**p) for p in values.get("parameters") or []]
    values["cited"] = [CitedObservation(**c) for c in values.get("cited") or []]
    return PendingConfirmation(**values)


# --- a caller's proposals, over /v1/runs/{id}/proposals (the proposer is the token's label) ---

_FIELDS = frozenset(f.name for f in fields(Decision))


def decision_from(data: dict[str, Any]) -> Decision:
    """A :class:`Decision` from a ``DecisionStateOut`` body."""
    return Decision(**{k: v for k, v in data.items() if k in _FIELDS})


class RemoteProposals:
    _call: Any  # RemoteClient's transport

    def propose(
        self,
        run_id: str,
        proposal: dict[str, Any],
        *,
        by: str = "",
        step: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
        wait_s: float = 0.0,
    ) -> Decision:
        """``POST /v1/runs/{id}/proposals``, then (with ``wait_s``) its long poll."""
        if isinstance(usage, Usage):
            usage = usage.model_dump()
        body = {"proposal": proposal, "step": step, "usage": usage}
        poll = min(wait_s, MAX_POLL_S)
        data = self._call(
            "POST",
            f"/runs/{run_id}/proposals",
            json={k: v for k, v in body.items() if v is not None},
            params={"wait": poll},
            timeout=poll + 30.0,
        )
        decision = decision_from(data)
        if wait_s > poll and decision.state == "pending":
            return self.decision(run_id, decision.step, wait_s=wait_s - poll)
        return decision

    def decision(
        self, run_id: str, step: int, *, wait_s: float = 0.0, seen: str = "pending"
    ) -> Decision:
        """``GET /v1/runs/{id}/proposals/{step}``, long-polled in pieces of at most
        :data:`MAX_POLL_S` until its state is not ``seen`` or ``wait_s`` passed."""
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            poll = min(MAX_POLL_S, max(0.0, deadline - time.monotonic()))
            data = self._call(
                "GET",
                f"/runs/{run_id}/proposals/{step}",
                params={"wait": round(poll, 3), "seen": seen},
                timeout=poll + 30.0,
            )
            decision = decision_from(data)
            if decision.state != seen or time.monotonic() >= deadline:
                return decision


class RemoteClient(RemoteReads, RemoteProposals):
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

    # --- transport -----------------------------------------------------------------------

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
        """``POST /v1/runs``: validate, record and enqueue a run; its id. ``spec`` is a
        :class:`~warrant.runner.spec.RunSpec`, a dict or JSON text. ``publish`` and
        ``started_by`` are ignored: the server publishes, and records the token's label."""
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

    def get_run(self, run_id: str) -> RunInfo:
        return run_info(self._call("GET", f"/runs/{run_id}"))

    def reveal(self, run_id: str, *, by: str = "", origin: Origin | None = None) -> Revealed | None:
        """``GET /v1/runs/{id}?reveal=true``: the pending proposal's sensitive values (a token
        that may confirm; else ``Forbidden`` ``REVEAL_FORBIDDEN``), ``None`` when the run
        waits for no confirmation. ``by`` and ``origin`` are ignored: the server traces the
        token's identity and the address it saw."""
        data = self._call("GET", f"/runs/{run_id}", params={"reveal": "true"})
        shown = data.get("revealed")
        if not shown:
            return None
        return Revealed(**{f.name: shown[f.name] for f in fields(Revealed)})

    def list_runs(self, *, limit: int = 50, status: str | None = None) -> list[RunInfo]:
        """The newest runs first (the server pages by 200 at most; more pages are followed)."""
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

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events in order (``seq``, ``event``, ``step``, ``proposal_id``,
        ``details``, ``at``), as :meth:`Client.trace` returns them."""
        events: list[dict[str, Any]] = self._call("GET", f"/runs/{run_id}/trace")["events"]
        return events

    def working_memory(self, run_id: str) -> dict[str, Any]:
        view: dict[str, Any] = self._call("GET", f"/runs/{run_id}/view")
        return view

    def policy_tools(self, *, seen_within_s: float) -> frozenset[str] | None:
        """``None``: the HTTP API does not show the workers' registrations (the server's
        gate decides, and a fixture plan is checked against this process's registry)."""
        return None

    def wait(
        self, run_id: str, *, timeout: float = 60.0, until: frozenset[str] | set[str] | None = None
    ) -> RunInfo:
        """Long-poll ``GET /v1/runs/{id}/wait`` until the run settles (terminal or waiting for
        a person), or reaches one of ``until``, or ``timeout`` passes; the last state seen."""
        targets = until or SETTLED
        deadline = time.monotonic() + timeout
        version: int | None = None
        while True:
            left = max(0.0, deadline - time.monotonic())
            poll = min(MAX_POLL_S, left)
            data = self._call(
                "GET",
                f"/runs/{run_id}/wait",
                params={"version": version, "timeout": round(poll, 3)},
                timeout=poll + self.timeout,
            )
            info = run_info(data)
            if info.status in targets or time.monotonic() >= deadline:
                return info
            if info.status in SETTLED and version == info.version:
                time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
            version = info.version

    def wait_change(self, run_id: str, *, version: int | None, timeout: float) -> RunInfo:
        """One long poll: the run once its version differs from ``version`` or it is settled,
        else after ``timeout`` (at most :data:`MAX_POLL_S`) as it was: what ``warrant run
        wait`` follows, one progress line per change."""
        poll = round(min(MAX_POLL_S, max(0.0, timeout)), 3)
        data = self._call(
            "GET",
            f"/runs/{run_id}/wait",
            params={"version": version, "timeout": poll},
            timeout=poll + self.timeout,
        )
        return run_info(data)

    def ids_like(self, key: str, *, kind: str = "run", min_length: int = 6) -> list[str]:
        """As :meth:`Client.ids_like <warrant.runner.client.runs.RunsClient.ids_like>`, over
        the API: a whole run id is asked for, a prefix is looked for among the newest
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
        """Approve exactly the pending proposal; the run's version after it. ``by`` and
        ``origin`` are ignored: the server records the token's identity (``name (role)``)
        and the address it saw. ``precondition``:
        the state's fingerprint the approver saw (see :meth:`Client.confirm`)."""
        return self._decide(run_id, "confirm", proposal_hash, precondition=precondition)

    def decline(
        self, run_id: str, *, proposal_hash: str, by: str, origin: Origin | None = None
    ) -> int:
        """Refuse the pending proposal; the run's version after it. ``by`` and ``origin``
        are ignored: the server records the token's identity and the address it saw."""
        return self._decide(run_id, "decline", proposal_hash)

    def _decide(
        self, run_id: str, action: str, proposal_hash: str, *, precondition: str | None = None
    ) -> int:
        body = {"proposal_hash": proposal_hash}
        if precondition is not None:
            body["precondition"] = precondition
        return int(self._call("POST", f"/runs/{run_id}/{action}", json=body)["version"])

    def answer(self, run_id: str, *, text: str, by: str) -> RunInfo:
        """Answer a ``needs_input`` run's question. ``by`` is ignored (the token's identity)."""
        return run_info(self._call("POST", f"/runs/{run_id}/answer", json={"text": text}))

    def cancel(self, run_id: str, *, by: str, reason: str = "", revoke: bool = True) -> RunInfo:
        """Cancel the run. ``by`` is ignored (the token's identity); the server revokes."""
        data = self._call("POST", f"/runs/{run_id}/cancel", json={"reason": reason})
        return run_info(data)

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
    ) -> int:
        """Grant a capability (an operator token's role is needed); the grant's id.
        ``granted_by`` and ``operator_token`` are ignored: the token decides and is recorded."""
        body = {
            "capability": capability,
            "resource_scope": resource_scope,
            "expires_at_step": expires_at_step,
            "max_uses": max_uses,
            **({"destinations_from": destinations_from} if destinations_from is not None else {}),
            "expires_at": expires_at.isoformat() if expires_at is not None else None,
            "expires_in_s": expires_in_s,
            "widen": widen,
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
        """Approve one exact proposal ahead of time; the pre-approval's id. ``approved_by``
        and ``operator_token`` are ignored: the token decides and is recorded."""
        body = {"tool": tool, "tool_version": tool_version, "arguments": arguments}
        data = self._call("POST", f"/runs/{run_id}/pre-approvals", json=body)
        return int(data["pre_approval_id"])

    def resolve_handoff(self, handoff_id: str, *, outcome: str, by: str, reason: str) -> RunInfo:
        """A person ends a handed-off run. ``by`` is ignored (the token's identity)."""
        body = {"outcome": outcome, "reason": reason}
        return run_info(self._call("POST", f"/handoffs/{handoff_id}/resolve", json=body))


_conforms: type[RunnerClient] = RemoteClient
