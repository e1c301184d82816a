"""The Python API (client side): start runs, read them, wait for them.

client = Client.from_env()
run_id = client.start_run(spec_dict)
info = client.wait(run_id, timeout=30)
"""

from __future__ import annotations

import hmac
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from warrant.broker.transitions import stop_changes, stop_events
from warrant.ledger import reads
from warrant.ledger.db import engine_for, retry_once_on_disconnect, session_scope
from warrant.ledger.models import (
    Command,
    Confirmation,
    GrantRow,
    Handoff,
    Proposal,
    Run,
)
from warrant.ledger.repo import append_events, run_view, to_datetime, transition
from warrant.runner.canonical import content_hash
from warrant.runner.codes import ObservationKind, ObservationSource, Phase, RunStatus, StopReason
from warrant.runner.errors import (
    ConfirmationRefused,
    HandoffNotFound,
    InvalidRequest,
    RunNotFound,
    SpecError,
    StateConflict,
    Unauthorized,
)
from warrant.runner.planning import Stop
from warrant.runner.settings import WarrantSettings, resolved_urls
from warrant.runner.spec import Grant, PluginPlannerSpec, RunSpec, parse_run_spec

__all__ = ["Client", "RunInfo"]

#: Statuses at which :meth:`Client.wait` returns (nothing moves without outside input).
SETTLED = frozenset(
    {
        *(s.value for s in RunStatus if s.terminal),
        RunStatus.WAITING_CONFIRMATION.value,
        RunStatus.HANDOFF.value,
    }
)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    status: str
    phase: str
    stop_reason: str | None
    step: int
    model_calls: int
    tool_calls: int
    version: int
    answer: str | None
    goal: str
    subject: str
    created_at: str
    finished_at: str | None
    confirmation_request: dict[str, Any] | None = None

    @classmethod
    def of(cls, run: Run, *, confirmation_request: dict[str, Any] | None = None) -> RunInfo:
        return cls(
            run_id=run.id,
            status=run.status,
            phase=run.phase,
            stop_reason=run.stop_reason,
            step=run.step,
            model_calls=run.model_calls,
            tool_calls=run.tool_calls,
            version=run.version,
            answer=run.answer,
            goal=run.goal,
            subject=run.subject,
            created_at=run.created_at.isoformat(),
            finished_at=run.finished_at.isoformat() if run.finished_at else None,
            confirmation_request=confirmation_request,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


RESOLUTIONS = ("completed", "failed", "cancelled")


def _handoff_dict(h: Handoff) -> dict[str, Any]:
    return {
        "handoff_id": h.id,
        "run_id": h.run_id,
        "reason": h.reason,
        "created_at": h.created_at.isoformat(),
        "resolved_at": h.resolved_at.isoformat() if h.resolved_at else None,
        "resolved_by": h.resolved_by,
        "resolution": h.resolution,
        "resolution_reason": h.resolution_reason,
        "bundle": h.bundle,
    }


class Client:
    """Talks to the ledger and publishes the first planner message of a run."""

    def __init__(self, *, engine: Engine, publisher: Any) -> None:
        self.engine = engine
        self.publisher = publisher

    @classmethod
    def from_env(cls) -> Client:
        from warrant.broker import telemetry
        from warrant.broker.app import app
        from warrant.broker.publish import Publisher

        _, database_url = resolved_urls()
        telemetry.configure(service_name="warrant-client")
        return cls(engine=engine_for(database_url), publisher=Publisher.fail_fast(app))

    def start_run(self, spec: RunSpec | dict[str, Any] | str, *, publish: bool = True) -> str:
        """Validate, record and enqueue a run. A bad spec raises SpecError; nothing is written.

        A broker that cannot be reached raises :class:`~warrant.runner.errors.BrokerUnavailable`
        with the run's id: the run is recorded (running, planning) and the reconciler's
        stalled-run sweep publishes its first message once the broker is back."""
        if not isinstance(spec, RunSpec):
            spec = parse_run_spec(spec)
        if isinstance(spec.planner, PluginPlannerSpec):
            from warrant.runner.planner_kinds import check_planner, planner_kinds
            from warrant.runner.settings import WarrantSettings

            settings = WarrantSettings()
            kinds = planner_kinds(refs=settings.planners, entry_points=settings.plugin_entry_points)
            check_planner(spec, kinds)
        from warrant.broker import telemetry

        run_id = str(uuid.uuid4())
        with telemetry.span("run.start", run_id=run_id):
            self._record_run(run_id, spec, trace_id=telemetry.current_trace_id())
            if publish:
                self.publisher.planner(run_id, 1)
        return run_id

    def _record_run(self, run_id: str, spec: RunSpec, *, trace_id: str | None) -> None:
        """Insert the run; once more if the connection was lost (a database restart). The
        insert is keyed by the run id, so a repeat cannot write it twice: if the first one
        committed before the connection went, the repeat's duplicate key means done."""
        try:
            retry_once_on_disconnect(self._insert_run)(run_id, spec, trace_id=trace_id)
        except (IntegrityError, psycopg.IntegrityError):
            if not self._run_exists(run_id):
                raise

    def _run_exists(self, run_id: str) -> bool:
        with session_scope(self.engine) as s:
            return reads.run_exists(s, run_id)

    def _insert_run(self, run_id: str, spec: RunSpec, *, trace_id: str | None) -> None:
        from warrant.ledger.steps import autocommit, create_run

        goal = {"goal": spec.goal}
        with autocommit(self.engine, held=False) as conn:
            create_run(
                conn,
                run_id=run_id,
                status=RunStatus.RUNNING.value,
                phase=Phase.PLANNING.value,
                goal=spec.goal,
                subject=spec.subject,
                spec=spec.model_dump(mode="json"),
                trace_id=trace_id,
                deadline_at=datetime.now(tz=UTC) + timedelta(seconds=spec.budgets.deadline_s),
                grants=[g.model_dump(mode="json") for g in spec.grants],
                observation={
                    "observation_id": "user-1",
                    "kind": ObservationKind.USER.value,
                    "source": ObservationSource.USER.value,
                    "content": goal,
                    "content_hash": content_hash(goal),
                },
                events=[
                    (
                        "run.created",
                        {
                            "subject_hash": content_hash(spec.subject)[:16],
                            "grants": len(spec.grants),
                            "budgets": spec.budgets.model_dump(mode="json"),
                        },
                    ),
                    ("state.transitioned", {"from": None, "to": RunStatus.RUNNING.value}),
                ],
            )

    @retry_once_on_disconnect
    def get_run(self, run_id: str) -> RunInfo:
        with session_scope(self.engine) as s:
            run = s.get(Run, run_id)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
            request = None
            if run.status == RunStatus.WAITING_CONFIRMATION and run.pending_proposal_id:
                pending = s.get(Proposal, run.pending_proposal_id)
                request = pending.confirmation_request if pending else None
            return RunInfo.of(run, confirmation_request=request)

    @retry_once_on_disconnect
    def working_memory(self, run_id: str) -> dict[str, Any]:
        """The planner's view for the run's next step, rebuilt from the ledger."""
        from warrant.broker.views import load_view
        from warrant.ledger.memory import MemoryStore
        from warrant.tools.plugins import registry_for

        view = load_view(
            self.engine, run_id, registry=registry_for(), memory=MemoryStore(self.engine)
        )
        if view is None:
            raise RunNotFound(f"no run {run_id}")
        return view.model_dump(mode="json")

    def memory(self) -> Any:
        from warrant.ledger.memory import MemoryStore

        return MemoryStore(self.engine)

    # --- operator and user actions ---------------------------------------------------------

    def confirm(self, run_id: str, *, proposal_hash: str, by: str) -> int:
        """Approve exactly the pending proposal (bound to its hash). Returns the new version."""
        return self._decide(run_id, proposal_hash=proposal_hash, by=by, approved=True)

    def decline(self, run_id: str, *, proposal_hash: str, by: str) -> int:
        """Refuse the pending proposal; the planner sees a decline observation."""
        return self._decide(run_id, proposal_hash=proposal_hash, by=by, approved=False)

    def _decide(self, run_id: str, *, proposal_hash: str, by: str, approved: bool) -> int:
        if not by.strip():
            raise ConfirmationRefused(
                "a confirmation needs the identity of who gave it",
                code="CONFIRMATION_IDENTITY_REQUIRED",
            )
        now = time.time()
        with session_scope(self.engine) as s:
            run = s.get(Run, run_id, with_for_update=True)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
            pending = s.get(Proposal, run.pending_proposal_id) if run.pending_proposal_id else None
            if (
                run.status != RunStatus.WAITING_CONFIRMATION
                or pending is None
                or not pending.confirmation_request
            ):
                raise ConfirmationRefused(
                    f"run {run_id} is {run.status}, not waiting for a confirmation",
                    code="RUN_NOT_WAITING_CONFIRMATION",
                )
            request = pending.confirmation_request
            if pending.proposal_hash != proposal_hash:
                raise ConfirmationRefused(
                    "that hash is not the pending proposal's", code="CONFIRMATION_HASH_MISMATCH"
                )
            if now >= float(request["expires_at"]):
                raise ConfirmationRefused(
                    "the confirmation request has expired", code="CONFIRMATION_EXPIRED"
                )
            trace_id = run.trace_id
            confirmation_id = str(uuid.uuid4())
            s.add(
                Confirmation(
                    id=confirmation_id,
                    run_id=run_id,
                    proposal_hash=proposal_hash,
                    tool=str(request["tool"]),
                    approved=approved,
                    used=False,
                    expires_at_step=int(request["expires_at_step"]),
                    expires_at=to_datetime(float(request["expires_at"])),
                    decided_by=by,
                )
            )
            s.flush()
            version = transition(
                s,
                run_id,
                run.version,
                changes={
                    "status": RunStatus.RUNNING.value,
                    "phase": Phase.POLICY.value,
                    "stop_reason": None,
                },
                events=[
                    (
                        "confirmation.approved" if approved else "confirmation.declined",
                        {
                            "confirmation_id": confirmation_id,
                            "proposal_hash": proposal_hash,
                            "by": by,
                        },
                    ),
                    ("state.transitioned", {"from": run.status, "to": RunStatus.RUNNING.value}),
                ],
                step=run.step,
                proposal_id=pending.proposal_id,
            )
        from warrant.broker import telemetry

        with telemetry.run_context(trace_id):
            self.publisher.policy(run_id, version)
        return version

    def cancel(self, run_id: str, *, by: str, reason: str = "", revoke: bool = True) -> RunInfo:
        """Cancel a run: no stage starts new work for it afterwards.

        Nothing in flight: the run is ``cancelled`` at once and its queued messages are
        dropped. A tool running (or an effect still unknown): the run goes to ``cancelling``,
        the tool is interrupted (revoke with terminate; the tool also sees the ledger flag),
        and the run ends ``cancelled`` only once the effect is known. ``revoke=False`` skips the
        broadcast (the ledger flag alone must then stop the tool).
        """
        in_flight = False
        with session_scope(self.engine) as s:
            run = s.get(Run, run_id, with_for_update=True)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
            status = RunStatus(run.status)
            if status in (RunStatus.CANCELLING, RunStatus.CANCELLED):
                return RunInfo.of(run)
            if status.terminal or status is RunStatus.HANDOFF:
                raise StateConflict(
                    f"run {run_id} is {status.value}; nothing to cancel", code="RUN_NOT_CANCELLABLE"
                )
            cmd = (
                s.get(Command, run.active_command_id, with_for_update=True)
                if run.active_command_id
                else None
            )
            in_flight = status is RunStatus.RECONCILING or (
                cmd is not None and cmd.status == "started"
            )
            requested = (
                "cancel.requested",
                {"by": by, "reason_chars": len(reason), "in_flight": in_flight},
            )
            view = run_view(run)
            if in_flight:
                transition(
                    s,
                    run_id,
                    run.version,
                    changes={"status": RunStatus.CANCELLING.value},
                    events=[
                        requested,
                        (
                            "state.transitioned",
                            {"from": status.value, "to": RunStatus.CANCELLING.value},
                        ),
                    ],
                    step=run.step,
                )
            else:
                if cmd is not None and cmd.status == "issued":
                    cmd.status = "discarded"
                stop = Stop(RunStatus.CANCELLED, StopReason.CANCELLED, {"effect": "none"})
                transition(
                    s,
                    run_id,
                    run.version,
                    changes=stop_changes(stop),
                    events=[requested, *stop_events(view, stop, step=run.step)],
                    step=run.step,
                )
        if revoke:
            self.publisher.revoke_run(run_id, terminate=in_flight)
        return self.get_run(run_id)

    # --- human handoff ---------------------------------------------------------------------

    @retry_once_on_disconnect
    def handoffs(self, *, open_only: bool = True, limit: int = 50) -> list[dict[str, Any]]:
        with session_scope(self.engine) as s:
            rows = reads.handoffs(s, open_only=open_only, limit=limit)
            return [_handoff_dict(h) for h in rows]

    @retry_once_on_disconnect
    def handoff(self, handoff_id: str) -> dict[str, Any]:
        """One handoff by its id (or the newest of a run, given the run id)."""
        with session_scope(self.engine) as s:
            h = reads.handoff_by_id_or_run(s, handoff_id)
            if h is None:
                raise HandoffNotFound(f"no handoff {handoff_id}")
            return _handoff_dict(h)

    def resolve_handoff(self, handoff_id: str, *, outcome: str, by: str, reason: str) -> RunInfo:
        """A person ends the run: a command through the state machine (compare-and-set on
        the version, recorded with identity and reason), never a raw status edit."""
        if outcome not in RESOLUTIONS:
            raise InvalidRequest(
                f"outcome must be one of {', '.join(RESOLUTIONS)}", code="INVALID_RESOLUTION"
            )
        if not by.strip() or not reason.strip():
            raise InvalidRequest(
                "a resolution needs who (--by) and why (--reason)",
                code="RESOLUTION_IDENTITY_REQUIRED",
            )
        with session_scope(self.engine) as s:
            h = s.get(Handoff, self.handoff(handoff_id)["handoff_id"], with_for_update=True)
            assert h is not None
            run = s.get(Run, h.run_id, with_for_update=True)
            assert run is not None
            if h.resolved_at is not None or run.status != RunStatus.HANDOFF:
                raise StateConflict(
                    f"handoff {h.id} is already resolved", code="HANDOFF_ALREADY_RESOLVED"
                )
            stop = Stop(
                RunStatus(outcome),
                StopReason.RESOLVED_BY_HUMAN,
                {"by": by, "outcome": outcome, "previous_reason": run.stop_reason},
            )
            h.resolved_at, h.resolved_by = datetime.now(tz=UTC), by
            h.resolution, h.resolution_reason = outcome, reason
            transition(
                s,
                run.id,
                run.version,
                changes=stop_changes(stop),
                events=[
                    (
                        "handoff.resolved",
                        {
                            "handoff_id": h.id,
                            "by": by,
                            "outcome": outcome,
                            "reason_chars": len(reason),
                        },
                    ),
                    *stop_events(run_view(run), stop, step=run.step),
                ],
                step=run.step,
            )
            run_id = run.id
        return self.get_run(run_id)

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
    ) -> int:
        """Grant a capability to a running run (an authenticated operator call)."""
        expected = WarrantSettings().operator_token
        if expected and not hmac.compare_digest(expected, operator_token or ""):
            raise Unauthorized("a valid operator token is required to grant capabilities")
        try:
            grant = Grant(
                capability=capability,
                resource_scope=resource_scope,
                expires_at_step=expires_at_step,
                max_uses=max_uses,
            )
        except ValidationError as exc:
            raise SpecError(
                "invalid grant",
                errors=[
                    {"field": ".".join(map(str, e["loc"])), "message": e["msg"]}
                    for e in exc.errors(include_url=False)
                ],
            ) from None
        with session_scope(self.engine) as s:
            run = s.get(Run, run_id, with_for_update=True)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
            row = GrantRow(
                run_id=run_id,
                capability=grant.capability,
                resource_scope=grant.resource_scope,
                expires_at_step=grant.expires_at_step,
                max_uses=grant.max_uses,
                uses=0,
                source="api",
            )
            s.add(row)
            s.flush()
            append_events(
                s,
                run_id,
                [
                    (
                        "grant.added",
                        {
                            "grant_id": row.id,
                            "capability": grant.capability,
                            "resource_scope": grant.resource_scope,
                            "by": granted_by,
                        },
                    )
                ],
                step=run.step,
            )
            return row.id

    @retry_once_on_disconnect
    def list_runs(self, *, limit: int = 50, status: str | None = None) -> list[RunInfo]:
        with session_scope(self.engine) as s:
            return [RunInfo.of(r) for r in reads.runs(s, limit=limit, status=status)]

    @retry_once_on_disconnect
    def trace(self, run_id: str) -> list[dict[str, Any]]:
        self.get_run(run_id)
        with session_scope(self.engine) as s:
            rows = reads.trace(s, run_id)
            return [
                {
                    "seq": e.seq,
                    "event": e.event,
                    "step": e.step,
                    "proposal_id": e.proposal_id,
                    "details": e.details,
                    "at": e.created_at.isoformat(),
                }
                for e in rows
            ]

    @retry_once_on_disconnect
    def observations(self, run_id: str) -> list[dict[str, Any]]:
        with session_scope(self.engine) as s:
            rows = reads.observations(s, run_id)
            return [
                {
                    "observation_id": o.observation_id,
                    "kind": o.kind,
                    "source": o.source,
                    "step": o.step,
                    "content": o.content,
                    "observation_version": o.observation_version,
                }
                for o in rows
            ]

    def wait(
        self, run_id: str, *, timeout: float = 60.0, until: frozenset[str] | set[str] | None = None
    ) -> RunInfo:
        """Block until the run settles (terminal or waiting for a person), or reaches one of
        ``until``, or ``timeout`` passes; returns the last state seen."""
        targets = until or SETTLED
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            status = self._status(run_id)
            if status is None or status in targets or time.monotonic() >= deadline:
                info = self.get_run(run_id)  # no such run: RunNotFound
                if info.status in targets or time.monotonic() >= deadline:
                    return info
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)

    @retry_once_on_disconnect
    def _status(self, run_id: str) -> str | None:
        """The run's status alone (what :meth:`wait` polls)."""
        from warrant.ledger.steps import autocommit, run_status

        with autocommit(self.engine, held=False) as conn:
            return run_status(conn, run_id)
